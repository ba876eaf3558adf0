-- resv in a luv (libuv) loop: sign-ups run as tasks while a timer keeps
-- ticking; the loop never waits for the database.
--
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" luajit examples/hosts/luv.lua
--   ... scripts/with-mongo sh -c 'luajit examples/hosts/luv.lua "$RESV_TEST_URI"'
local uv = require "luv"
local resv = require "resv"
local resv_luv = require "resv.luv"

local store = assert(resv.open { uri = arg and arg[1] })
local users = assert(store:type("shop", "user"))
-- A run id of random bytes: runs against one server never meet.
local urandom = assert(io.open("/dev/urandom", "rb"))
local run = urandom:read(6):gsub(".", function(c) return ("%02x"):format(c:byte()) end)
urandom:close()

-- Watches resv.fd() and calls resv.poll() while tasks are pending.
local watcher = resv_luv.start(uv)

local ticks = 0
local ticker = uv.new_timer()
ticker:start(10, 10, function() ticks = ticks + 1 end)
ticker:unref() -- uv.run() returns when the sign-ups are done

local taken = 0
for i = 1, 10 do
  watcher.spawn(function()
    local email = { namespace = "email", key = ("user%d-%s@example.com"):format(i % 5, run) }
    local owner = { id = "user-" .. i }
    local r = assert(users:reserve(email, owner, "signup", 30000))
    if r.status == "reserved" then
      assert(users:confirm(email, owner, 1))
      taken = taken + 1
    end
  end)
end

uv.run()
print(("%d addresses taken by 10 sign-ups; the timer ticked %d times meanwhile"):format(taken, ticks))
assert(taken == 5)
watcher.stop()
ticker:close()
uv.run()
store:close()

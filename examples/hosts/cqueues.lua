-- resv in a cqueues controller: sign-ups run as tasks next to other
-- cqueues work; the controller never waits for the database, and a
-- cqueues.sleep inside a task sleeps as asked.
--
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" luajit examples/hosts/cqueues.lua
--   ... scripts/with-mongo sh -c 'luajit examples/hosts/cqueues.lua "$RESV_TEST_URI"'
local cqueues = require "cqueues"
local resv = require "resv"

local store = assert(resv.open { uri = arg and arg[1] })
local users = assert(store:type("shop", "user"))
-- A run id of random bytes: runs against one server never meet.
local urandom = assert(io.open("/dev/urandom", "rb"))
local run = urandom:read(6):gsub(".", function(c) return ("%02x"):format(c:byte()) end)
urandom:close()

local cq = cqueues.new()
local pump = require("resv.cqueues").start(cq)

local taken, done = 0, 0
for i = 1, 10 do
  pump.spawn(function()
    local email = { namespace = "email", key = ("user%d-%s@example.com"):format(i % 5, run) }
    local owner = { id = "user-" .. i }
    local r = assert(users:reserve(email, owner, "signup", 30000))
    if r.status == "reserved" then
      cqueues.sleep(0.05) -- e.g. the account service's answer
      assert(users:confirm(email, owner, 1))
      taken = taken + 1
    end
    done = done + 1
  end)
end

local ticks = 0
cq:wrap(function()
  while done < 10 do cqueues.sleep(0.01); ticks = ticks + 1 end
end)

assert(cq:loop())
print(("%d addresses taken by 10 sign-ups; the ticker ran %d times meanwhile"):format(taken, ticks))
assert(taken == 5 and ticks > 0)
store:close()

-- A plain LuaJIT script: reserve, confirm, conflict, abandon and expiry.
--
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" luajit examples/script.lua
--   ... luajit examples/script.lua mongodb://127.0.0.1:27017/app
--
-- Outside a coroutine of resv.spawn every call blocks until its answer, so
-- a script reads top to bottom. Without a URI it uses the in-memory store.
local resv = require "resv"

local uri = arg and arg[1]
local store = assert(resv.open { uri = uri })
print("store:", tostring(store))

local users = assert(store:type("shop", "user"))

-- The store's clock, frozen so the expiry below is deterministic.
local now = 1700000000000
store:set_time(now)

local email = { namespace = "email", key = "ann" .. now .. "@example.com" }
local ann = { id = "user-ann" }
local bob = { id = "user-bob" }

local function show(what, r, err)
  if not r then
    print(string.format("%-30s error: %s", what, err))
    return
  end
  local parts = { r.status }
  if r.owner then parts[#parts + 1] = "owner=" .. r.owner.id end
  if r.state then parts[#parts + 1] = "state=" .. r.state end
  if r.expires_at then parts[#parts + 1] = "expires_at=+" .. (r.expires_at - now) end
  if r.version then parts[#parts + 1] = "version=" .. r.version end
  if r.holds then parts[#parts + 1] = "holds={" .. table.concat(r.holds, ",") .. "}" end
  print(string.format("%-30s %s", what, table.concat(parts, " ")))
end

-- Ann signs up: hold the e-mail for 30 s while her command runs.
show("ann reserves", users:reserve(email, ann, "signup-1", 30000))
-- Bob tries the same e-mail meanwhile: a conflict, not an error.
show("bob reserves", users:reserve(email, bob, "signup-7", 30000))
-- Ann's fact is stored as version 1: the e-mail is hers for good.
show("ann confirms", users:confirm(email, ann, 1))
show("bob reserves again", users:reserve(email, bob, "signup-8", 30000))
show("get", users:get(email))

-- A command that fails gives its hold back.
local slug = { namespace = "slug", key = "ann" .. now }
show("ann reserves a slug", users:reserve(slug, ann, "rename-1", 30000))
show("ann abandons it", users:abandon(slug, ann, "rename-1"))
show("get", users:get(slug))

-- A crashed command never locks a value: its hold expires.
local nick = { namespace = "nick", key = "zed" .. now }
show("bob reserves a nick", users:reserve(nick, bob, "cmd-1", 5000))
store:set_time(now + 5000)
show("5 s later, get", users:get(nick))
show("ann takes it over", users:reserve(nick, ann, "cmd-2", 5000))

-- Bad input is an error value.
show("empty key", users:reserve({ namespace = "email", key = "" }, ann, "x", 1000))

-- Clean up what this run wrote (a MongoDB keeps it otherwise).
users:release(email, ann)
users:release(nick, ann)
store:close()
show("after close", users:get(email))

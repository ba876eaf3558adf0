-- bench/lua_answers.lua: the bytes of Lua heap a call's answer takes, on
-- the memory store, with the collector stopped (collectgarbage("count")
-- before and after KEYS calls, default 20000; the keys made before).
--
--   luajit bench/lua_answers.lua [KEYS]
--
-- An answer only read for its status in the loop that made it is not made
-- at all: LuaJIT sinks its allocation (the "dropped" row). Every other row
-- keeps its answers (the last 64), as a caller keeps what it reads; the
-- benches that time Lua calls keep theirs too (bench/nginx/charged.lua).
local resv = require "resv"

local KEYS = tonumber(arg[1]) or 20000
local OWNER = { tenant = "t1", id = "user-42" }
local OTHER = { tenant = "t1", id = "user-43" }
local kept = {}

local function keys_of(tag)
  local keys, pairs_ = {}, {}
  for i = 1, KEYS do
    keys[i] = { namespace = "email", key = tag .. i .. "@example.com" }
    pairs_[i] = { keys[i], { namespace = "username", key = tag .. i } }
  end
  return keys, pairs_
end

-- Bytes a call of fn(i), which returns the answer, kept or not.
local function bytes(fn, keep)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for i = 1, KEYS do
    local r = fn(i)
    if r.status ~= "reserved" and r.status ~= "conflict" then error(r.status) end
    if keep then kept[i % 64] = r end
  end
  local after = collectgarbage("count")
  collectgarbage("restart")
  return (after - before) * 1024 / KEYS
end

local store = assert(resv.open())
local t = assert(store:type("bench", "answers"))
local function reserve(keys, owner, opts)
  return function(i) return t:reserve(keys[i], owner, "req-1", 60000, opts) end
end
local dropped, kept_new, into = keys_of("d"), keys_of("k"), keys_of("i")
local _, both = keys_of("a")
local into_opts = { into = {} }
print(string.format("== answers' bytes from Lua, memory store (%d calls each, collector stopped)", KEYS))
local rows = {
  { "reserve, new key, answer dropped (sunk)", bytes(reserve(dropped, OWNER), false) },
  { "reserve, new key, answer kept", bytes(reserve(kept_new, OWNER), true) },
  { "reserve, held key (conflict), kept", bytes(reserve(kept_new, OTHER), true) },
  { "reserve_all of 2 new keys, kept", bytes(function(i)
      return t:reserve_all(both[i], OWNER, "req-1", 60000)
    end, true) },
  { "reserve, new key, { into = r }", bytes(reserve(into, OWNER, into_opts), true) },
}
for _, row in ipairs(rows) do
  print(string.format("  %-44s %7.1f bytes a call", row[1], row[2]))
end
store:close()

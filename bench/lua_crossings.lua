-- bench/lua_crossings.lua: how many times one call crosses the FFI into
-- libresv, per way of waiting.
--
--   LUA_PATH="lua/?.lua;;" LUA_CPATH="build/?.so;;" luajit bench/lua_crossings.lua [CALLS]
--
-- Every function of resv.ffi is wrapped in a counter before resv loads,
-- and CALLS reserves are made on a file store with sync = "disk" (every
-- call waits for a dispatcher thread) in each context:
--   plain     outside any coroutine: the call blocks in C;
--   spawned   one resv.spawn coroutine making the calls in turn, resumed
--             by resv.run (its loop's crossings counted apart: they serve
--             every waiting coroutine at once);
--   ngx       a content-phase request under a stand-in for OpenResty
--             whose ngx.run_worker_thread runs the named function at once
--             (the pool thread's crossings counted apart: in nginx they
--             run in that thread's own Lua state).
-- Prints the crossings per call by function, and their total.
local ffi = require "ffi"
local real = require "resv.ffi"

local CALLS = tonumber(arg[1]) or 200

local counts = {}
local side = "call" -- which side the crossings of the moment belong to
local loop_apart = false -- the main thread's crossings are resv.run's
local function side_now()
  if side == "call" and loop_apart and coroutine.running() == nil then
    return "run"
  end
  return side
end
package.loaded["resv.ffi"] = setmetatable({}, {
  __index = function(t, name)
    local v = real[name]
    if type(v) ~= "cdata" then
      return v
    end
    local f = function(...)
      local key = side_now() .. " " .. name
      counts[key] = (counts[key] or 0) + 1
      return v(...)
    end
    rawset(t, name, f)
    return f
  end,
})

-- A stand-in for OpenResty's ngx in a content phase.
local fake_ngx = {
  WARN = 5,
  log = function() end,
  get_phase = function() return "content" end,
  sleep = function() end,
  timer = { at = function() return true end },
  run_worker_thread = function(_, module, fn, ...)
    local was = side
    side = "thread"
    local r = require(module)[fn](...)
    side = was
    return true, r
  end,
}
package.loaded["ngx.semaphore"] = {
  new = function()
    return { wait = function() return true end, post = function() end }
  end,
}

local resv = require "resv"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local store = assert(resv.open { path = dir, sync = "disk" })
local users = assert(store:type("bench", "crossings"))
local OWNER = { id = "o" }

local function reserve(i)
  local r, err = users:reserve({ namespace = "n", key = "k" .. i }, OWNER, "a", 60000)
  assert(r and r.status == "reserved", err)
end

local function report(what, n)
  local names = {}
  local total = { call = 0 }
  for key, c in pairs(counts) do
    names[#names + 1] = key
    local s = key:match("^(%S+)")
    total[s] = (total[s] or 0) + c
  end
  table.sort(names)
  print(string.format("== %s: crossings per call (%d calls)", what, n))
  for _, key in ipairs(names) do
    print(string.format("  %-40s %6.2f", key, counts[key] / n))
  end
  for s, c in pairs(total) do
    print(string.format("  %-40s %6.2f", "total " .. s, c / n))
  end
  counts = {}
end

reserve(0)
counts = {}
for i = 1, CALLS do reserve(i) end
report("plain (blocks in C)", CALLS)

resv.spawn(function() reserve(CALLS + 1) end)
assert(resv.run())
counts = {}
loop_apart = true
resv.spawn(function()
  for i = 1, CALLS do
    reserve(CALLS + 1 + i)
  end
end)
assert(resv.run())
loop_apart = false
report("spawned (resv.spawn, resumed by resv.run)", CALLS)

require("resv.ngx")._use(fake_ngx)
local base = 2 * CALLS + 2
local co = coroutine.wrap(function()
  reserve(base)
  counts = {}
  for i = 1, CALLS do reserve(base + i) end
end)
co()
require("resv.ngx")._use(nil)
report("ngx (content phase, the inbox)", CALLS)

store:close()
os.execute("rm -rf " .. dir)

-- bench/lua_all.lua: a reserve_all of 2 keys against one reserve and two,
-- from Lua on the memory store, or on a file store with sync = "process"
-- (fresh keys, answers made into tables).
--
--   luajit bench/lua_all.lua [KEYS] [memory|file]
--
-- Each round reserves KEYS (default 100000) new e-mail and user name pairs
-- on a fresh type three ways, in turn: one reserve of the e-mail only, two
-- reserves (the e-mail, then the user name), one reserve_all of both;
-- thread CPU time per sign-up, median of 7 rounds. Prints ns per sign-up
-- and the ratios to one reserve and to two. Nothing here fails on a figure.
local resv = require "resv"
local ffi = require "ffi"
-- bench/nginx's helpers: charged.kept below, and clock.lua, which declares
-- clock_gettime and its struct for the thread's clock here too.
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/nginx/?.lua;" .. package.path
local charged = require "charged"

local ts = ffi.new("bench_clock_timespec")
local CLOCK_THREAD_CPUTIME_ID = 3
local function cpu_ns()
  ffi.C.clock_gettime(CLOCK_THREAD_CPUTIME_ID, ts)
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

local KEYS = tonumber(arg[1]) or 100000
local ROUNDS = 7

local function median(t)
  table.sort(t)
  return t[(#t + 1) / 2]
end

local STORE = arg[2] or "memory"
local dir
if STORE == "file" then
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir) == 0)
end
local store = assert(resv.open(dir and { path = dir, sync = "process" } or {}))
local serial = 0

local WAYS = {
  { "reserve x1", function(t, e, u, owner, attempt)
      return t:reserve(e, owner, attempt, 30000)
    end },
  { "reserve x2", function(t, e, u, owner, attempt)
      local r = t:reserve(e, owner, attempt, 30000)
      if not r then return r end
      return t:reserve(u, owner, attempt, 30000)
    end },
  { "reserve_all 2", function(t, e, u, owner, attempt)
      return t:reserve_all({ e, u }, owner, attempt, 30000)
    end },
}

-- Each answer is kept (bench/nginx/charged.lua says why). The collector
-- runs as it would in a host: the keys are made in the loop, so the live
-- heap stays small and each round runs many cycles.
local KEPT, kept = charged.KEPT, charged.kept

local function round(way)
  serial = serial + 1
  local t = assert(store:type("bench" .. serial, "all"))
  local fn = way[2]
  local t0 = cpu_ns()
  for i = 1, KEYS do
    local id = "u" .. i
    local r, err = fn(t, { namespace = "email", key = id .. "@x" },
                      { namespace = "username", key = id }, { id = id }, "a")
    if not r or r.status ~= "reserved" then
      error(way[1] .. ": " .. tostring(err or r.status))
    end
    kept[i % KEPT] = r
  end
  return (cpu_ns() - t0) / KEYS
end

local figures = {}
for _, way in ipairs(WAYS) do
  figures[way[1]] = {}
  round(way) -- warm-up: the traces
end
for _ = 1, ROUNDS do
  for _, way in ipairs(WAYS) do
    local list = figures[way[1]]
    list[#list + 1] = round(way)
  end
end

print(string.format("== reserve_all from Lua, %s store (%d sign-ups a round, median of %d)",
                    STORE, KEYS, ROUNDS))
-- Each round's own ratio of reserve_all to its reserve (the rounds
-- interleave the ways), before the lists are sorted.
local per_round = {}
for i = 1, ROUNDS do
  per_round[i] = figures["reserve_all 2"][i] / figures["reserve x1"][i]
end
local one, two = median(figures["reserve x1"]), median(figures["reserve x2"])
for _, way in ipairs(WAYS) do
  local list = figures[way[1]]
  local m = median(list)
  print(string.format("  %-14s %7.0f ns  (min %.0f, max %.0f)  %.2fx one reserve  %.2fx two",
                      way[1], m, list[1], list[#list], m / one, m / two))
end
local ratio = median(per_round)
print(string.format("ratio reserve_all_over_reserve %.2f (min %.2f, max %.2f over %d rounds)",
                    ratio, per_round[1], per_round[#per_round], ROUNDS))
store:close()
if dir then os.execute("rm -rf " .. dir) end

-- bench/nginx/churn.lua: a churn of distinct keys with a 1 s ttl in one
-- nginx worker, through the memory store or through ngx.shared.DICT:add.
--
-- GET /run?store=resv|dict&n=KEYS&seconds=S&ttl_ms=T&grace_ms=G
--   resv: users:reserve(key, owner, "req-1", T) on resv.open{ sweep_grace_ms = G }
--   dict: dict:add("\0email\0" .. key, owner, T / 1000)
-- Key i is "user<i>@example.com" (20-ish bytes), each reserved once and
-- never confirmed. Both use the real clock (the store's is the system
-- clock, never set_time): the n calls are spread evenly over S seconds of
-- wall time, in batches of one millisecond's worth, the request sleeping
-- (ngx.sleep) whenever it is ahead of that schedule and never catching up
-- when behind, so at any moment at most about n / S * T / 1000 keys are
-- live in either. Every n / 40 keys (and once
-- before the first) it answers a line
--   sample <keys> <elapsed ms> <RSS kB> <a> <b>
-- with the worker's resident set (/proc/self/statm) and, for resv, a and b
-- the entries and bytes of store:stats(); for dict, a the zone's bytes in
-- use (capacity - free_space, whole pages) and b its capacity.
local now_ns = require "clock"

local function now_s()
  return now_ns() * 1e-9
end

local PAGE_KB = 4
local function rss_kb()
  local f = assert(io.open("/proc/self/statm", "r"))
  local line = f:read("*l")
  f:close()
  local _, resident = line:match("^(%d+)%s+(%d+)")
  return tonumber(resident) * PAGE_KB
end

local _M = {}

local OWNER = { tenant = "t1", id = "user-42" }
local OWNER_VALUE = "t1\0user-42"

function _M.run()
  local args = ngx.req.get_uri_args()
  local which = args.store
  local n = tonumber(args.n) or 4000000
  local seconds = tonumber(args.seconds) or 20
  local ttl_ms = tonumber(args.ttl_ms) or 1000
  local grace_ms = tonumber(args.grace_ms) or 1000
  local rate = n / seconds                       -- keys per second of wall time
  local batch = math.max(1, math.floor(rate / 1000))
  local every = math.max(1, math.floor(n / 40))

  local call, sample
  if which == "resv" then
    local resv = require "resv"
    local store = assert(resv.open { sweep_grace_ms = grace_ms })
    local users = assert(store:type("bench", "churn"))
    local key = { tenant = "", namespace = "email", key = "" }
    call = function(i)
      key.key = "user" .. i .. "@example.com"
      local r, err = users:reserve(key, OWNER, "req-1", ttl_ms)
      if not r or r.status ~= "reserved" then error("reserve: " .. tostring(err)) end
    end
    sample = function()
      local st = assert(store:stats())
      return st.entries, st.bytes
    end
  elseif which == "dict" then
    local dict = ngx.shared.churn_dict
    local exptime = ttl_ms / 1000
    call = function(i)
      local ok, err, forcible = dict:add("\0email\0user" .. i .. "@example.com", OWNER_VALUE, exptime)
      if not ok then error("dict add: " .. tostring(err)) end
      if forcible then error("dict add evicted a live item: the zone is too small") end
    end
    sample = function()
      local cap = dict:capacity()
      return cap - dict:free_space(), cap
    end
  else
    ngx.status = 400
    ngx.say("store=resv or store=dict")
    return
  end

  collectgarbage()
  local out = {}
  local t0 = now_s()
  local function record(i)
    local a, b = sample()
    out[#out + 1] = string.format("sample %d %.0f %d %d %d", i, (now_s() - t0) * 1000,
                                  rss_kb(), a, b)
  end
  record(0)
  -- Key i is due at t0 + i / rate + late. A batch that ends behind its
  -- time by more than 10 ms (the worker was not scheduled: a loaded
  -- machine) moves the rest of the schedule later rather than catching up
  -- in a burst, so the rate never goes over n / seconds. nginx's cached
  -- clock, which the DICT's expiry reads, is updated after every batch
  -- (the worker only yields when it is ahead).
  local i, late = 0, 0
  while i < n do
    local stop = math.min(n, i + batch)
    for j = i + 1, stop do
      call(j)
      if j % every == 0 then record(j) end
    end
    i = stop
    ngx.update_time()
    local ahead = i / rate + late - (now_s() - t0)
    if ahead >= 0.001 then
      ngx.sleep(ahead)
    elseif ahead < -0.01 then
      late = late - ahead
    end
  end
  out[#out + 1] = string.format("elapsed_ms %.0f", (now_s() - t0) * 1000)
  out[#out + 1] = string.format("late_ms %.0f", late * 1000)
  ngx.say(table.concat(out, "\n"))
end

return _M

-- bench: figures for resv.ngx's waiting mechanisms, inside nginx.
--
--   GET /bench/latency?wait=thread&n=400&conc=1
--     conc light threads each make n/conc sequential get calls; answers
--     the p50/p99 of one call's latency (microseconds), measured around
--     the call in the worker.
--   GET /bench/cpu?wait=thread&k=32
--     k light threads each make one get call, all waiting together (the
--     driver stalls the server's reads with a fail point); answers the
--     process's CPU time (user+system, every thread) over the wait, and the
--     wall time.
local ffi = require "ffi"
local resv_ngx = require "resv.ngx"
local gateway = require "gateway"

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec_t;
int clock_gettime(int clk, bench_timespec_t *ts);
typedef struct { long tv_sec; long tv_usec; } bench_timeval_t;
typedef struct {
  bench_timeval_t ru_utime, ru_stime;
  long rest[14];
} bench_rusage_t;
int getrusage(int who, bench_rusage_t *usage);
]]

local ts = ffi.new("bench_timespec_t")
local ru = ffi.new("bench_rusage_t")

local function now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

local function cpu_us()
  ffi.C.getrusage(0, ru) -- RUSAGE_SELF: every thread of the worker
  return (tonumber(ru.ru_utime.tv_sec) + tonumber(ru.ru_stime.tv_sec)) * 1e6
    + tonumber(ru.ru_utime.tv_usec) + tonumber(ru.ru_stime.tv_usec)
end

local function quantile(sorted, q)
  return sorted[math.max(1, math.ceil(#sorted * q))]
end

local _M = {}

local function use(args)
  if args.wait == "none" then
    return true
  end
  local ok, err = resv_ngx.use(args.wait or "thread")
  if not ok then
    ngx.status = 400
    ngx.say(err)
    return false
  end
  return true
end

function _M.latency()
  local args = ngx.req.get_uri_args()
  if not use(args) then return end
  local n = tonumber(args.n) or 400
  local conc = tonumber(args.conc) or 1
  local users = gateway.users()
  local samples, errors = {}, 0
  local function worker(id)
    for i = 1, math.floor(n / conc) do
      local key = { namespace = "bench", key = id .. "-" .. i }
      local t0 = now_us()
      local r = users:get(key)
      samples[#samples + 1] = now_us() - t0
      if not r then errors = errors + 1 end
    end
  end
  local threads = {}
  local t0 = now_us()
  for c = 1, conc do
    threads[c] = ngx.thread.spawn(worker, c)
  end
  for c = 1, conc do
    ngx.thread.wait(threads[c])
  end
  local wall = now_us() - t0
  table.sort(samples)
  ngx.say(string.format('{"wait":"%s","calls":%d,"errors":%d,"p50_us":%.0f,'
    .. '"p99_us":%.0f,"per_s":%.0f,"mechanism":"%s"}', args.wait, #samples,
    errors, quantile(samples, 0.5), quantile(samples, 0.99),
    #samples / (wall / 1e6), resv_ngx.mechanism()))
end

function _M.cpu()
  local args = ngx.req.get_uri_args()
  if not use(args) then return end
  local k = tonumber(args.k) or 32
  local users = gateway.users()
  local errors = 0
  local t0, c0 = now_us(), cpu_us()
  local threads = {}
  for c = 1, k do
    threads[c] = ngx.thread.spawn(function()
      if args.wait == "none" then
        ngx.sleep(tonumber(args.idle) or 1)
      elseif not users:get({ namespace = "bench", key = "cpu-" .. c }) then
        errors = errors + 1
      end
    end)
  end
  for c = 1, k do
    ngx.thread.wait(threads[c])
  end
  local wall, cpu = now_us() - t0, cpu_us() - c0
  ngx.say(string.format('{"wait":"%s","k":%d,"errors":%d,"wall_ms":%.1f,'
    .. '"cpu_ms":%.2f}', args.wait, k, errors, wall / 1e3, cpu / 1e3))
end

return _M

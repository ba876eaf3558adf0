-- bench/nginx/clock.lua: the monotonic clock in ns, through the FFI, for
-- the benchmarks that run inside nginx (ngx.now has millisecond steps).
local ffi = require "ffi"

ffi.cdef [[
typedef struct bench_clock_timespec { long tv_sec; long tv_nsec; } bench_clock_timespec;
int clock_gettime(int clk, bench_clock_timespec *ts);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("bench_clock_timespec")

return function()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

-- bench/nginx/charged.lua: a Lua pass timed with what its garbage costs,
-- for the benchmarks that compare Lua calls (bench/nginx/embedded.lua in
-- nginx, bench/lua_overhead.lua in plain LuaJIT).
--
--   local charged = require "charged"
--   charged.kept[i % charged.KEPT] = answer   -- in the pass's loop
--   local ns = charged.pass(calls, fn, ...)   -- fn(...) returns ns a call
--
-- Each answer is kept (the last KEPT of a pass), as a caller keeps what it
-- reads: an answer only read for its status in the loop that made it is
-- not made at all (LuaJIT sinks the allocation), and the pass would time
-- tables no caller gets.
--
-- pass starts on a collected heap (the garbage of the pass before is not
-- its own) and runs fn with the collector stopped; then a full collection
-- is timed, less the fastest of three right after it (the live heap
-- alone), and that cost is shared among the pass's calls. Left running,
-- the collector charges a pass by where its cycles fall: over the 100,000
-- key tables of bench/nginx/embedded.lua a pass of fresh reserves (360
-- bytes a call) ended before its first cycle, a reserve_all's (920 bytes)
-- ran one or two. What is charged is freeing the garbage; a process whose
-- collector also walks a large live heap pays more for each byte.
local now_ns = require "clock"

local _M = { KEPT = 64, kept = {} }

local function collect_ns()
  local t0 = now_ns()
  collectgarbage()
  return now_ns() - t0
end

function _M.pass(calls, fn, ...)
  collectgarbage()
  collectgarbage("stop")
  local ns = fn(...)
  local with = collect_ns()
  local alone = math.min(collect_ns(), collect_ns(), collect_ns())
  collectgarbage("restart")
  for i = 0, _M.KEPT - 1 do _M.kept[i] = nil end
  return ns + math.max(0, with - alone) / calls
end

return _M

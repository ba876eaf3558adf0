-- resv in a real luv loop (Debian's lua-luv under LuaJIT) with resv.luv:
-- calls that wait on the server never stall a 10 ms timer, answers are
-- right, a deadline is kept with no answer coming, an error in a task is
-- reported, and uv.run() returns when the work is done. Run from the
-- repository root against the emulator:
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" scripts/with-mongo luajit spec/hosts/luv_test.lua
-- Prints one line per check and "N passed, M failed"; exits 1 on a failure.
package.path = "lua/?.lua;lua/?/init.lua;spec/hosts/?.lua;" .. package.path

local uv = require "luv"
local common = require "common"
local resv_luv = require "resv.luv"

local check = common.check
local store, t, app = common.open("luv")
local meter = common.meter()
local ticker = uv.new_timer()
ticker:start(common.TICK_MS, common.TICK_MS, meter.tick)
ticker:unref() -- the ticker alone does not keep uv.run() going

-- 1. 20 tasks, their first calls waiting 600 ms on the server.
local failures = {}
local watcher = resv_luv.start(uv, { on_failure = function(f) failures[#failures + 1] = f end })
local N = 20
local work = common.workload(t, app, N)
meter.reset()
local started = common.clock()
for i = 1, N do
  watcher.spawn(work.task, i)
end
uv.run()
local took = common.clock() - started
check("uv.run() returns once every task is done", work.done() == N, ("%d of %d done in %d ms"):format(work.done(), N, took))
check("20 tasks x 3 calls answer right", work.right() == N, work.right() .. " right")
check("the calls did wait on the server", took >= common.BLOCK_MS, took .. " ms")
check("a 10 ms timer keeps ticking while they wait", meter.worst() < common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 2. The control: the same wait made blocking (outside a spawned
-- coroutine, in a timer callback) stalls the loop, so check 1 can fail.
common.block(app, 1, common.BLOCK_MS)
local keep = uv.new_timer()
keep:start(0, 0, function()
  local r = common.blocking_call(t)
  check("the control's call answers", r and r.status == "reserved")
end)
meter.reset()
uv.run()
check("the control: a blocking call does stall the loop", meter.worst() > common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 3. A call past its deadline (the server holds it 3 s) answers timeout at
-- its deadline: the watcher's timer resumes it, the loop ticks meanwhile.
common.block(app, 1, 3000)
local r, err, waited
meter.reset()
watcher.spawn(function()
  local t0 = common.clock()
  r, err = t:reserve({ namespace = "n", key = "slow" }, { id = "o" }, "x", 60000, { timeout_ms = 300 })
  waited = common.clock() - t0
end)
uv.run()
check("a call past its deadline answers timeout in time",
      r == nil and tostring(err):match("^timeout") and waited >= 300 and waited < 300 + 250 + 1000,
      ("%s after %s ms"):format(tostring(err), tostring(waited)))
check("the loop ticks while it waits", meter.worst() < common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 4. An error in a task ends that task only and reaches on_failure.
common.block(app, 1, 50)
watcher.spawn(function()
  t:reserve({ namespace = "n", key = "boom" }, { id = "o" }, "x", 60000)
  error("boom after the call")
end)
uv.run()
check("an error in a task reaches on_failure", #failures == 1 and failures[1]:match("boom after the call"),
      failures[1] and failures[1]:match("[^\n]*"))

-- 5. A coroutine that yields on its own is resumed on the next turn.
local turns = 0
watcher.spawn(function()
  for _ = 1, 3 do coroutine.yield(); turns = turns + 1 end
end)
uv.run()
check("a task yielding on its own goes on, turn by turn", turns == 3, turns .. " turns")

watcher.stop()
ticker:close()
keep:close()
uv.run()
store:close()
os.exit(common.finish() and 0 or 1)

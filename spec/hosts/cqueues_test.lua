-- resv in a real cqueues controller (Debian's lua-cqueues under LuaJIT)
-- with resv.cqueues: calls that wait on the server never stall a 10 ms
-- cqueues.sleep tick, answers are right, a cqueues.sleep inside a
-- coroutine of resv.spawn sleeps as long as asked (while a pump runs) or
-- is refused with an error (with none), a deadline is kept, and a
-- signal sent to the process reaches cqueues' signal.listen. Run from
-- the repository root against the emulator:
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" scripts/with-mongo luajit spec/hosts/cqueues_test.lua
-- Prints one line per check and "N passed, M failed"; exits 1 on a failure.
package.path = "lua/?.lua;lua/?/init.lua;spec/hosts/?.lua;" .. package.path

local cqueues = require "cqueues"
local common = require "common"
local resv = require "resv"
local resv_cqueues = require "resv.cqueues"

local check = common.check
local store, t, app = common.open("cqueues")
local cq = cqueues.new()
local meter = common.meter()

-- Ticks every 10 ms on cq until until() is true.
local function ticker(until_fn)
  cq:wrap(function()
    while not until_fn() do
      cqueues.sleep(common.TICK_MS / 1000)
      meter.tick()
    end
  end)
end

local function loop()
  local ok, err = cq:loop()
  if not ok then check("cq:loop() runs without error", false, tostring(err)) end
end

local failures = {}
local pump = resv_cqueues.start(cq, { on_failure = function(f) failures[#failures + 1] = f end })

-- 1. 20 tasks, their first calls held 600 ms by the server.
local N = 20
local work = common.workload(t, app, N)
meter.reset()
local started = common.clock()
for i = 1, N do
  pump.spawn(work.task, i)
end
ticker(function() return work.done() == N end)
loop()
local took = common.clock() - started
check("20 tasks x 3 calls answer right", work.done() == N and work.right() == N,
      ("%d done, %d right in %d ms"):format(work.done(), work.right(), took))
check("the calls did wait on the server", took >= common.BLOCK_MS, took .. " ms")
check("a 10 ms cqueues tick keeps ticking while they wait", meter.worst() < common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 2. The issue's hazard: cqueues.sleep(0.5) in a coroutine of resv.spawn,
-- after a call. It used to return after 45 ms (taken for "wait a frame").
common.block(app, 1, 100)
local slept, answered
meter.reset()
pump.spawn(function()
  answered = t:reserve({ namespace = "n", key = "sleeper" }, { id = "o" }, "x", 60000)
  local t0 = common.clock()
  cqueues.sleep(0.5)
  slept = common.clock() - t0
end)
ticker(function() return slept ~= nil end)
loop()
check("cqueues.sleep(0.5) in a coroutine of resv.spawn sleeps 0.5 s",
      answered and answered.status == "reserved" and slept and slept >= 490 and slept < 1500,
      ("slept %s ms"):format(tostring(slept)))
check("the loop ticks meanwhile", meter.worst() < common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 3. A call past its deadline (the server holds it 3 s) answers timeout
-- at its deadline.
common.block(app, 1, 3000)
local r, err, waited
pump.spawn(function()
  local t0 = common.clock()
  r, err = t:reserve({ namespace = "n", key = "slow" }, { id = "o" }, "x", 60000, { timeout_ms = 300 })
  waited = common.clock() - t0
end)
loop()
check("a call past its deadline answers timeout in time",
      r == nil and tostring(err):match("^timeout") and waited >= 300 and waited < 300 + 250 + 1000,
      ("%s after %s ms"):format(tostring(err), tostring(waited)))
check("no task failed", #failures == 0, failures[1])

-- 4. Without a pump a cqueues wait in a coroutine of resv.spawn is refused
-- with an error, never returns early.
pump.stop()
local reached
cq:wrap(function()
  resv.spawn(function()
    cqueues.sleep(0.5)
    reached = true
  end)
end)
loop()
local _, refused = resv.poll()
check("without a pump it is refused with an error",
      reached == nil and refused and refused[1]:match("no resv.cqueues pump serves it") ~= nil,
      refused and refused[1]:match("[^\n]*"))

-- 5. The control for 1: a call in a coroutine of cq:wrap blocks the
-- controller, so the tick check can fail.
common.block(app, 1, common.BLOCK_MS)
local blocked
meter.reset()
cq:wrap(function()
  cqueues.sleep(0.05)
  blocked = common.blocking_call(t)
end)
ticker(function() return blocked ~= nil end)
loop()
check("the control: a call in a coroutine of cq:wrap stalls the loop",
      blocked and blocked.status == "reserved" and meter.worst() > common.STALL_LINE_MS,
      ("worst tick %.0f ms late"):format(meter.worst()))

-- 6. A signal sent to the process is the host's: cqueues' signal.listen
-- (a signalfd, the signal blocked in this thread) takes the SIGUSR1s, and
-- none reaches a thread of the store's (the dispatcher's, mongoc's
-- monitors), where it would end the process.
local signal = require "cqueues.signal"
signal.block(signal.SIGUSR1)
local listener = signal.listen(signal.SIGUSR1)
local stat = assert(io.open("/proc/self/stat"))
local pid = stat:read("*n")
stat:close()
local heard = 0
cq:wrap(function()
  for _ = 1, 20 do
    os.execute("kill -USR1 " .. pid)
    if listener:wait(5) == signal.SIGUSR1 then heard = heard + 1 end
  end
end)
loop()
check("cqueues' signal.listen takes the process's SIGUSR1s", heard == 20, heard .. " of 20")

store:close()
os.exit(common.finish() and 0 or 1)

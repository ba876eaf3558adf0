-- resv.cqueues: resv in a cqueues controller (docs/design.md section 14).
--
--   local cqueues = require "cqueues"
--   local cq = cqueues.new()
--   local pump = require("resv.cqueues").start(cq)
--   pump.spawn(function()               -- resv.spawn, then the pump wakes
--     local r, err = users:reserve(key, owner, "signup-1", 30000)
--     cqueues.sleep(0.5)                -- cqueues waits work here too
--     ...
--   end)
--   assert(cq:loop())                   -- returns once nothing is pending
--
-- The pump is a coroutine of cq that waits with cqueues.poll on resv.fd()
-- (readable while answers wait), at most until resv.timeout() (the next
-- waiting call's deadline), and calls resv.poll(), which resumes the
-- spawned coroutines whose answers are ready. It ends when no spawned
-- coroutine is pending, so cq:loop() returns; pump.spawn starts it again.
--
-- Calls wait without blocking the controller only in coroutines of
-- resv.spawn (pump.spawn). In a coroutine of cq:wrap a call blocks the
-- whole controller until its answer, as anywhere outside resv.spawn.
--
-- A cqueues wait (cqueues.sleep, cqueues.poll, sockets, conditions) inside
-- a coroutine of resv.spawn yields to resv's scheduler, not to cq. While a
-- pump runs, the scheduler hands such a wait to it: a coroutine of cq
-- waits for it and resumes the spawned coroutine with the results, so the
-- sleep lasts as long as asked. Without a pump the scheduler ends that
-- coroutine with an error saying so (reported by resv.poll), rather than
-- letting the wait return at once.
--
-- opts.on_failure(traceback) gets an error raised in a spawned coroutine
-- (default: written to io.stderr). One pump per process serves those
-- waits: the last one started (resv's scheduler is one per process).
local cqueues = require "cqueues"
local condition = require "cqueues.condition"
local resv = require "resv"
local sched = require "resv.sched"

local io = io
local type = type
local error = error
local select = select
local unpack = unpack

local _M = {}

local function default_failure(traceback)
  io.stderr:write("resv: ", traceback, "\n")
end

local function pack(...)
  return { n = select("#", ...), ... }
end

-- A pump's state: the controller cq, opts' on_failure, the pollable
-- object on resv.fd() (inbox), the condition that wakes the loop, and
-- whether the loop runs or the pump was stopped.

local function report(p, failures)
  if failures then
    for i = 1, #failures do
      p.on_failure(failures[i])
    end
  end
end

local function loop(p)
  while not p.stopped and resv.pending() > 0 do
    local ms = resv.timeout()
    if sched.turn_pending() then
      ms = 0
    end
    if ms == nil then
      cqueues.poll(p.inbox, p.wake)
    else
      cqueues.poll(p.inbox, p.wake, ms / 1000)
    end
    local _, failures = resv.poll()
    report(p, failures)
  end
  p.running = false
end

local function ensure_running(p)
  if p.stopped then
    return
  end
  if p.running then
    p.wake:signal()
  elseif resv.pending() > 0 then
    p.running = true
    p.cq:wrap(loop, p)
  end
end

-- A spawned coroutine's cqueues wait: a coroutine of cq waits for it,
-- then resumes the spawned one with what cqueues.poll answered.
local function take_wait(p, co, ...)
  p.cq:wrap(function(...)
    local results = pack(cqueues.poll(...))
    sched.resume(co, unpack(results, 1, results.n))
    report(p, select(2, resv.poll()))
    ensure_running(p)
  end, ...)
end

function _M.start(cq, opts)
  if type(cq) ~= "userdata" and type(cq) ~= "table" or cq.wrap == nil then
    error("resv.cqueues.start: expected a cqueues controller (cqueues.new())", 2)
  end
  opts = opts or {}
  local fd, err = resv.fd()
  if fd == nil then
    return nil, err
  end
  local p = {
    cq = cq, on_failure = opts.on_failure or default_failure,
    -- What cqueues.poll waits on: a pollable object on the inbox descriptor.
    inbox = { pollfd = function() return fd end, events = function() return "r" end },
    wake = condition.new(), running = false, stopped = false,
  }
  local pump = {}

  sched.foreign_yield(cqueues._POLL, function(co, ...) take_wait(p, co, ...) end)

  -- resv.spawn(fn, ...), then the pump runs while it is pending. Called
  -- outside the controller (before cq:loop()), the coroutine starts on the
  -- controller's first step instead, so that a cqueues wait before its
  -- first call is a wait of cq's (outside a controller cqueues.sleep
  -- blocks); then it returns nothing.
  function pump.spawn(fn, ...)
    if type(fn) ~= "function" then
      error("resv.cqueues: spawn expects a function, got " .. type(fn), 2)
    end
    if not cqueues.running() then
      local args = pack(...)
      cq:wrap(function()
        resv.spawn(fn, unpack(args, 1, args.n))
        ensure_running(p)
      end)
      return nil
    end
    local co = resv.spawn(fn, ...)
    ensure_running(p)
    return co
  end

  -- Starts the pump after coroutines were spawned with resv.spawn itself.
  function pump.arm()
    ensure_running(p)
  end

  -- Stops the pump; cqueues waits in spawned coroutines are refused again.
  function pump.stop()
    p.stopped = true
    sched.foreign_yield(cqueues._POLL, nil)
    p.wake:signal()
  end

  ensure_running(p)
  return pump
end

return _M

-- resv.sched: coroutines that wait for jobs, and the inbox that wakes them.
--
-- resv.spawn(fn, ...) runs fn in a coroutine the module knows. When a call
-- in such a coroutine must wait for the dispatcher, the coroutine records
-- its job and yields a private token; the job, once finished, lands in the
-- module's one inbox. resv.poll() drains the inbox and resumes the waiting
-- coroutines (never blocking); resv.run() alternates poll() with a blocking
-- wait on the inbox until every spawned coroutine has ended; resv.fd() is
-- the inbox's descriptor, readable while answers wait, for hosts with their
-- own event loop.
--
-- A spawned coroutine that yields anything else (a plain
-- coroutine.yield()) is resumed by the next poll(): "wait one frame";
-- but a yield of another scheduler's protocol goes to the host helper that
-- registered it (foreign_yield: resv.cqueues), and cqueues' own with no
-- such helper ends the coroutine with an error saying so.
--
-- An error raised in a spawned coroutine ends that coroutine only. Its
-- message and traceback are kept and handed out by the next poll() (second
-- result) or run() (second result, the first being false); spawn() itself
-- never raises for them.
--
-- A waiting coroutine gives up at its job's deadline plus a grace
-- (resv_job_deadline): poll() resumes it then, run() sleeps no longer than
-- that, and resv.timeout() tells a host with its own loop how long it may
-- wait before the next poll().
--
-- The inbox is made on first use, never when the module loads: nginx loads
-- modules in the master process, and the inbox's eventfd must belong to the
-- worker that uses it. The coroutines, the inbox and its answers belong to
-- the process that made them (docs/design.md section 9): in a child forked after,
-- the first call into this module finds the fork generation changed and
-- starts afresh, leaving the parent's objects alone (the C side leaves a
-- parent's inbox and jobs untouched in a child).
local ffi = require "ffi"
local C = require "resv.ffi"
local base = require "resv.base"

local coroutine = coroutine
local co_create = coroutine.create
local co_resume = coroutine.resume
local co_running = coroutine.running
local co_status = coroutine.status
local co_yield = coroutine.yield
local traceback = debug.traceback
local error = error
local pairs = pairs
local next = next
local package = package
local type = type
local tonumber = tonumber
local ffi_gc = ffi.gc
local ffi_new = ffi.new

local resv_inbox_new = C.resv_inbox_new
local resv_inbox_destroy = C.resv_inbox_destroy
local resv_inbox_fd = C.resv_inbox_fd
local resv_inbox_drain = C.resv_inbox_drain
local resv_inbox_wait = C.resv_inbox_wait
local resv_job_done = C.resv_job_done
local resv_job_deadline = C.resv_job_deadline
local resv_clock_ms = C.resv_clock_ms
local resv_process_generation = C.resv_process_generation

local error_string = base.error_string
local job_address = base.job_address
local err_buf = base.err_buf

local DRAIN_MAX = 64

local drained = ffi_new("resv_job_t *[?]", DRAIN_MAX)

-- The token a waiting coroutine yields, so poll() can tell it from a
-- coroutine that yielded on its own.
local WAITING = {}

local generation     -- the fork generation the state below belongs to
local inbox          -- cdata resv_inbox_t *, made by get_inbox()
local spawned = {}   -- coroutine -> true, while it has not ended
local live = 0       -- how many coroutines spawned holds
local waiting = {}   -- job address -> coroutine waiting for that job
local give_up = {}   -- waiting coroutine -> when it stops waiting (clock ms)
local earliest       -- the smallest value of give_up, nil when empty
local ready = {}     -- coroutines that yielded on their own, in order
local failures = {}  -- tracebacks not yet handed out

local _M = {}

-- In a child forked since the state was made, the state is the parent's:
-- drop it (the coroutines never run here, the inbox is never read).
local function own_process()
  local now = resv_process_generation()
  if generation ~= now then
    generation = now
    inbox = nil
    spawned, live, waiting, give_up, earliest = {}, 0, {}, {}, nil
    ready, failures = {}, {}
  end
end

-- The inbox, made on first use; or nil and an error. The caller made sure
-- the state is this process's (own_process).
local function made_inbox()
  if inbox == nil then
    local made = resv_inbox_new(err_buf)
    if made == nil then
      return nil, error_string(err_buf)
    end
    inbox = ffi_gc(made, resv_inbox_destroy)
  end
  return inbox
end

local function get_inbox()
  own_process()
  return made_inbox()
end
_M.inbox = get_inbox

-- True when the running coroutine was started by spawn() in this process.
function _M.in_spawned()
  local co = co_running()
  if co == nil or spawned[co] ~= true then
    return false
  end
  own_process()
  return spawned[co] == true
end

-- For a call about to wait: false outside a coroutine started by spawn()
-- in this process, else the inbox its job goes to, or nil and an error.
function _M.spawned_inbox()
  local co = co_running()
  if co == nil or spawned[co] ~= true then
    return false
  end
  own_process()
  if spawned[co] ~= true then
    return false
  end
  return made_inbox()
end

-- What poll() resumes a waiting coroutine with when its job was drained
-- from the inbox: that job is done.
local DRAINED = {}

-- Parks the running spawned coroutine until job is done or its deadline
-- (plus grace) has passed. job was submitted with this module's inbox, and
-- was not done when the caller last looked. Returns true when it is done.
function _M.wait(job)
  local co = co_running()
  local address = job_address(job)
  local until_ms = tonumber(resv_job_deadline(job))
  waiting[address] = co
  give_up[co] = until_ms
  if earliest == nil or until_ms < earliest then
    earliest = until_ms
  end
  local done
  repeat
    done = co_yield(WAITING) == DRAINED or resv_job_done(job)
  until done or resv_clock_ms() >= until_ms
  waiting[address] = nil
  give_up[co] = nil
  return done
end

local function finished(co)
  spawned[co] = nil
  live = live - 1
end

-- Yields of another scheduler's protocol, by their first value (a host
-- helper's marker): marker -> function(co, ...) that takes the coroutine
-- over until it resumes it with _M.resume. resv.cqueues registers
-- cqueues' poll marker this way.
local foreign = {}

-- A yield of cqueues' poll (cqueues.sleep, a socket or condition wait) in a
-- spawned coroutine with no resv.cqueues pump to serve it. Treated as
-- "wait one frame" it would return at once (a sleep of 45 ms instead of
-- 500), so it ends the coroutine with this error instead.
local function cqueues_marker()
  local cq = package.loaded.cqueues
  return type(cq) == "table" and cq._POLL or nil
end
local CQUEUES_REFUSED = "resv.spawn: a cqueues wait (cqueues.sleep, cqueues.poll, a socket "
  .. "or condition) in a coroutine of resv.spawn, and no resv.cqueues pump serves it: "
  .. "start one with require(\"resv.cqueues\").start(cq)"

local step

-- Files co by what its resume did.
local function filed(co, ok, what, ...)
  if not ok then
    failures[#failures + 1] = traceback(co, what)
    finished(co)
  elseif co_status(co) == "dead" then
    finished(co)
  elseif what ~= WAITING then
    local take = what ~= nil and foreign[what]
    if take then
      take(co, ...)
    elseif what ~= nil and what == cqueues_marker() then
      failures[#failures + 1] = traceback(co, CQUEUES_REFUSED)
      finished(co)
    else
      ready[#ready + 1] = co
    end
  end
end

-- Resumes co with the given arguments and files it by what it did.
function step(co, ...)
  filed(co, co_resume(co, ...))
end

-- For host helpers: marker's yields are handed to take(co, ...) (nil:
-- no longer), which later resumes co with _M.resume(co, results...).
function _M.foreign_yield(marker, take)
  foreign[marker] = take
end

function _M.resume(co, ...)
  own_process()
  if spawned[co] == true and co_status(co) == "suspended" then
    step(co, ...)
  end
end

-- True when a spawned coroutine yielded on its own and waits for the next
-- poll (a host with an event loop polls again on its next turn).
function _M.turn_pending()
  own_process()
  return ready[1] ~= nil
end

function _M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("resv.spawn: expected a function, got " .. type(fn), 2)
  end
  own_process()
  local co = co_create(fn)
  spawned[co] = true
  live = live + 1
  step(co, ...)
  return co
end

local function take_failures()
  if failures[1] == nil then
    return nil
  end
  local taken = failures
  failures = {}
  return taken
end

-- Appends to woken (n entries so far) the coroutines whose deadline has
-- passed, recomputes the earliest deadline of the others, and returns the
-- new count.
local function past_deadline(woken, n)
  if earliest == nil then
    return n
  end
  local now = resv_clock_ms()
  if now < earliest then
    return n
  end
  earliest = nil
  for co, until_ms in pairs(give_up) do
    if until_ms <= now then
      n = n + 1
      woken[n] = co
    elseif earliest == nil or until_ms < earliest then
      earliest = until_ms
    end
  end
  return n
end

-- The list of coroutines to resume and the set of those resumed, which
-- resume_ready empties and reuses; nil while one is in use (a poll() from a
-- plain coroutine inside a resumed one then makes its own).
local spare_woken, spare_seen = {}, {}

-- Resumes what can go on; returns how many coroutines were resumed.
local function resume_ready()
  own_process()
  local resumed = 0

  if ready[1] ~= nil then
    local yielded = ready
    ready = {}
    for i = 1, #yielded do
      step(yielded[i])
    end
    resumed = #yielded
  end

  -- Collect first, resume after: a resumed coroutine may submit jobs that
  -- finish into the inbox before this loop ends. A coroutine listed twice
  -- (done and past its deadline) is resumed once; one resumed while not
  -- ready yet waits again (_M.wait loops).
  local woken, seen = spare_woken, spare_seen
  spare_woken, spare_seen = nil, nil
  if woken == nil then
    woken, seen = {}, {}
  end
  local nwoken = 0
  if inbox ~= nil then
    repeat
      local n = tonumber(resv_inbox_drain(inbox, drained, DRAIN_MAX))
      for i = 0, n - 1 do
        local co = waiting[job_address(drained[i])]
        if co ~= nil then
          nwoken = nwoken + 1
          woken[nwoken] = co
        end
      end
    until n < DRAIN_MAX
  end
  local ndrained = nwoken
  nwoken = past_deadline(woken, nwoken)
  for i = 1, nwoken do
    local co = woken[i]
    if not seen[co] and co_status(co) == "suspended" then
      seen[co] = true
      step(co, i <= ndrained and DRAINED or nil)
      resumed = resumed + 1
    end
  end
  for i = 1, nwoken do
    seen[woken[i]] = nil
    woken[i] = nil
  end
  spare_woken, spare_seen = woken, seen

  return resumed
end

function _M.poll()
  if _M.in_spawned() then
    error("resv.poll: called from a spawned coroutine", 2)
  end
  local resumed = resume_ready()
  return resumed, take_failures()
end

-- Appends the failures reported since the last call to the list all
-- (made when the first arrives); returns the list.
local function append_failures(all)
  local failed = take_failures()
  if failed ~= nil then
    all = all or {}
    for i = 1, #failed do
      all[#all + 1] = failed[i]
    end
  end
  return all
end

-- Milliseconds until the next waiting coroutine's deadline (0 when one is
-- past it), or nil when none waits: how long a host with its own event
-- loop may wait for resv.fd() before it calls resv.poll() anyway.
local function timeout()
  -- earliest is recomputed lazily (at that deadline): when the last waiter
  -- has gone, nothing waits, whatever it still says.
  if earliest ~= nil and next(give_up) == nil then
    earliest = nil
  end
  if earliest == nil then
    return nil
  end
  local left = earliest - tonumber(resv_clock_ms())
  return left > 0 and left or 0
end

function _M.timeout()
  own_process()
  return timeout()
end

function _M.run()
  if _M.in_spawned() then
    error("resv.run: called from a spawned coroutine", 2)
  end
  local all
  while live > 0 do
    local resumed = resume_ready()
    all = append_failures(all)
    -- After a round that resumed some, the wait returns at once if answers
    -- came in meanwhile (the inbox's descriptor is readable while any
    -- wait), so it goes straight to the wait rather than to another round.
    if live > 0 and ready[1] == nil then
      if inbox ~= nil then
        resv_inbox_wait(inbox, timeout() or -1)
      elseif resumed == 0 then
        -- Nothing can wake the rest (they were resumed by other code and
        -- are no longer waiting on a job): stop rather than hang.
        break
      end
    end
  end
  all = append_failures(all)
  if all ~= nil then
    return false, all
  end
  return true
end

function _M.fd()
  local box, err = get_inbox()
  if box == nil then
    return nil, err
  end
  return tonumber(resv_inbox_fd(box))
end

-- How many spawned coroutines have not ended yet.
function _M.pending()
  own_process()
  return live
end

return _M

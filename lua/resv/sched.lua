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
-- coroutine.yield()) is resumed by the next poll(): "wait one frame".
--
-- An error raised in a spawned coroutine ends that coroutine only. Its
-- message and traceback are kept and handed out by the next poll() (second
-- result) or run() (second result, the first being false); spawn() itself
-- never raises for them.
--
-- The inbox is made on first use, never when the module loads: nginx loads
-- modules in the master process, and the inbox's eventfd must belong to the
-- worker that uses it.
local ffi = require "ffi"
local C = require "resv.ffi"

local coroutine = coroutine
local co_create = coroutine.create
local co_resume = coroutine.resume
local co_running = coroutine.running
local co_status = coroutine.status
local co_yield = coroutine.yield
local traceback = debug.traceback
local error = error
local type = type
local tonumber = tonumber
local ffi_cast = ffi.cast
local ffi_gc = ffi.gc
local ffi_new = ffi.new
local ffi_string = ffi.string

local resv_inbox_new = C.resv_inbox_new
local resv_inbox_destroy = C.resv_inbox_destroy
local resv_inbox_fd = C.resv_inbox_fd
local resv_inbox_drain = C.resv_inbox_drain
local resv_inbox_wait = C.resv_inbox_wait
local resv_job_done = C.resv_job_done
local resv_code_name = C.resv_code_name

local DRAIN_MAX = 64

local err_buf = ffi_new("resv_error_t")
local drained = ffi_new("resv_job_t *[?]", DRAIN_MAX)
local uintptr_t = ffi.typeof("uintptr_t")

-- The token a waiting coroutine yields, so poll() can tell it from a
-- coroutine that yielded on its own.
local WAITING = {}

local inbox          -- cdata resv_inbox_t *, made by get_inbox()
local spawned = {}   -- coroutine -> true, while it has not ended
local live = 0       -- how many coroutines spawned holds
local waiting = {}   -- job address -> coroutine waiting for that job
local ready = {}     -- coroutines that yielded on their own, in order
local failures = {}  -- tracebacks not yet handed out

local _M = {}

-- "<code>: <message>" for a filled resv_error_t.
local function error_string(err)
  local code = ffi_string(resv_code_name(err.code))
  local message = ffi_string(err.message)
  if message == "" then
    return code
  end
  return code .. ": " .. message
end
_M.error_string = error_string

local function job_address(job)
  return tonumber(ffi_cast(uintptr_t, job))
end

local function get_inbox()
  if inbox == nil then
    local made = resv_inbox_new(err_buf)
    if made == nil then
      return nil, error_string(err_buf)
    end
    inbox = ffi_gc(made, resv_inbox_destroy)
  end
  return inbox
end
_M.inbox = get_inbox

-- True when the running coroutine was started by spawn().
function _M.in_spawned()
  local co = co_running()
  return co ~= nil and spawned[co] == true
end

-- Parks the running spawned coroutine until job is done. job was
-- submitted with this module's inbox.
function _M.wait(job)
  local co = co_running()
  local address = job_address(job)
  waiting[address] = co
  repeat
    co_yield(WAITING)
  until resv_job_done(job)
  waiting[address] = nil
end

local function finished(co)
  spawned[co] = nil
  live = live - 1
end

-- Resumes co with the given arguments and files it by what it did.
local function step(co, ...)
  local ok, what = co_resume(co, ...)
  if not ok then
    failures[#failures + 1] = traceback(co, what)
    finished(co)
  elseif co_status(co) == "dead" then
    finished(co)
  elseif what ~= WAITING then
    ready[#ready + 1] = co
  end
end

function _M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("resv.spawn: expected a function, got " .. type(fn), 2)
  end
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

-- Resumes what can go on; returns how many coroutines were resumed.
local function resume_ready()
  local resumed = 0

  if ready[1] ~= nil then
    local yielded = ready
    ready = {}
    for i = 1, #yielded do
      step(yielded[i])
    end
    resumed = #yielded
  end

  if inbox ~= nil then
    -- Collect first, resume after: a resumed coroutine may submit jobs
    -- that finish into the inbox before this loop ends.
    local woken
    repeat
      local n = tonumber(resv_inbox_drain(inbox, drained, DRAIN_MAX))
      for i = 0, n - 1 do
        local co = waiting[job_address(drained[i])]
        if co ~= nil then
          woken = woken or {}
          woken[#woken + 1] = co
        end
      end
    until n < DRAIN_MAX
    if woken ~= nil then
      for i = 1, #woken do
        local co = woken[i]
        if co_status(co) == "suspended" then
          step(co)
          resumed = resumed + 1
        end
      end
    end
  end

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

function _M.run()
  if _M.in_spawned() then
    error("resv.run: called from a spawned coroutine", 2)
  end
  local all
  while live > 0 do
    local resumed = resume_ready()
    all = append_failures(all)
    if live > 0 and resumed == 0 and ready[1] == nil then
      if inbox == nil then
        -- Nothing can wake the rest (they were resumed by other code and
        -- are no longer waiting on a job): stop rather than hang.
        break
      end
      resv_inbox_wait(inbox, -1)
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
  return live
end

return _M

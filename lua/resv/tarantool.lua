-- resv.tarantool: waiting for a job inside Tarantool without blocking its
-- event loop (docs/design.md section 14).
--
-- In Tarantool every piece of Lua runs in a fiber, and a blocking C call
-- stalls all of them. So a call that must wait submits its job to an inbox
-- of this process's own and waits on a fiber.cond of its own; one poller
-- fiber waits for the inbox's descriptor with socket.iowait (the event
-- loop watches it meanwhile), drains the inbox and signals the cond of
-- each finished job. The calling fiber is the one that resumes, with its
-- fiber.self().storage and everything else it had. The poller runs while
-- calls wait and ends when none does; should it fail, each waiter still
-- gives up at its job's deadline plus grace (resv_job_deadline), so no
-- fiber hangs for ever.
--
-- It is the waiter resv.host picks inside Tarantool (the interface is
-- described there): usable() and present() are true inside Tarantool,
-- inbox() is the process's inbox (nil if none can be made: then a call's
-- wait blocks its fiber, within the deadline), wait(job, in_inbox) is
-- true once the job is done, false at its deadline. resv.host loads it only
-- inside Tarantool.
local ffi = require "ffi"
local C = require "resv.ffi"
local base = require "resv.base"

local pcall = pcall
local rawget = rawget
local require = require
local tonumber = tonumber
local tostring = tostring
local type = type
local ffi_gc = ffi.gc
local ffi_new = ffi.new

local resv_inbox_new = C.resv_inbox_new
local resv_inbox_destroy = C.resv_inbox_destroy
local resv_inbox_fd = C.resv_inbox_fd
local resv_inbox_drain = C.resv_inbox_drain
local resv_job_done = C.resv_job_done
local resv_job_wait = C.resv_job_wait
local resv_job_deadline = C.resv_job_deadline
local resv_clock_ms = C.resv_clock_ms
local resv_process_generation = C.resv_process_generation
local job_address = base.job_address

local DRAIN_MAX = 64
local POLL_S = 1 -- longest wait of the poller before it looks again

local drained = ffi_new("resv_job_t *[?]", DRAIN_MAX)

local fiber, socket -- Tarantool's modules, when this is Tarantool
do
  local ok_fiber, f = pcall(require, "fiber")
  local ok_socket, s = pcall(require, "socket")
  if ok_fiber and ok_socket and type(f) == "table" and f.cond ~= nil
     and type(s) == "table" and s.iowait ~= nil and rawget(_G, "_TARANTOOL") ~= nil then
    fiber, socket = f, s
  end
end

local inbox       -- this process's resv_inbox_t *
local generation  -- the fork generation it was made in
local waiters = {} -- job address -> fiber.cond of the fiber waiting for it
local nwaiters = 0
local polling = false

local _M = {}

function _M.usable()
  return fiber ~= nil
end
_M.present = _M.usable

function _M.inbox()
  local now = resv_process_generation()
  if inbox == nil or generation ~= now then
    local made = resv_inbox_new(base.err_buf)
    if made == nil then
      return nil
    end
    inbox, generation = ffi_gc(made, resv_inbox_destroy), now
    waiters, nwaiters, polling = {}, 0, false
  end
  return inbox
end

-- Signals the fiber of each finished job, taking it off the waiters: a
-- waiter whose entry is gone knows its job is done.
local function drain()
  repeat
    local n = tonumber(resv_inbox_drain(inbox, drained, DRAIN_MAX))
    for i = 0, n - 1 do
      local address = job_address(drained[i])
      local cond = waiters[address]
      if cond ~= nil then
        waiters[address] = nil
        nwaiters = nwaiters - 1
        cond:signal()
      end
    end
  until n < DRAIN_MAX
end

local function poll_loop()
  local fd = tonumber(resv_inbox_fd(inbox))
  while nwaiters > 0 do
    socket.iowait(fd, "R", POLL_S)
    drain()
  end
end

local function poller()
  local ok, err = pcall(poll_loop)
  polling = false
  if not ok then
    -- The waiters give up at their deadlines; the next call starts a
    -- new poller.
    local log_ok, log = pcall(require, "log")
    if log_ok then log.warn("resv: the poller fiber failed: %s", tostring(err)) end
  end
end

function _M.wait(job, in_inbox)
  local until_ms = resv_job_deadline(job)
  if not in_inbox then
    local left = tonumber(until_ms - resv_clock_ms())
    return resv_job_wait(job, left > 0 and left or 0)
  end
  local address = job_address(job)
  local cond = fiber.cond()
  waiters[address] = cond
  nwaiters = nwaiters + 1
  if not polling then
    polling = true
    fiber.create(poller)
  end
  repeat
    local left = tonumber(until_ms - resv_clock_ms())
    if left <= 0 then
      break
    end
    cond:wait(left / 1000)
  until waiters[address] ~= cond
  if waiters[address] ~= cond then
    return true
  end
  waiters[address] = nil
  nwaiters = nwaiters - 1
  return resv_job_done(job)
end

return _M

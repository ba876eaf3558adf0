-- resv.ngx: waiting for a job inside OpenResty without blocking the worker.
--
-- The interface resv.lua uses is two functions, so the mechanism can
-- change without touching it:
--   usable()  true when the running code is in an nginx phase whose
--             coroutine may yield;
--   wait(job) returns once resv_job_done(job), yielding meanwhile.
-- and two for the nginx configuration and benchmarks:
--   use(name)    picks the mechanism; true, or nil and an error;
--   mechanism()  the name of the mechanism in use.
--
-- The mechanisms (examples/openresty/README.md has the measurements that
-- chose the default):
--
--   "thread"   the default. The request's coroutine hands the wait to
--              ngx.run_worker_thread (lua-nginx-module 0.10.21+, nginx
--              built --with-threads, a `thread_pool resv threads=N;` in
--              the main configuration): a thread of nginx's pool blocks in
--              resv_job_wait and nginx resumes the coroutine through its
--              own event loop when the thread returns. Woken as soon as the
--              answer is there, no timer, no CPU while waiting; each
--              waiting call holds one pool thread (more calls queue for a
--              thread). Only rewrite, access and content phases may call
--              ngx.run_worker_thread: other phases (timers) use "watcher".
--              Without the thread pool it falls back to "watcher" for good,
--              logging why once.
--   "watcher"  one timer per worker, alive while calls wait, checks every
--              waiting job each millisecond and wakes the done ones
--              through ngx.semaphore.
--   "backoff"  each waiting call polls its job with ngx.sleep, the delay
--              doubling from 1 ms to 10 ms, as lua-resty-lock waits for a
--              lock. Also the fallback when ngx.semaphore or ngx.timer is
--              missing (a test's fake ngx).
--   "block"    resv_job_wait on the worker's own thread: blocks every
--              request of the worker. A baseline for benchmarks only.
--
-- A job a thread or the watcher still looks at is kept referenced here, so
-- the collector never frees it under them (see resv.lua: a waiting job
-- carries ffi.gc(job, resv_job_destroy)).
--
-- `ngx` is looked up when the module loads (lua-nginx-module sets it before
-- any Lua code runs); _use() replaces it, for tests outside nginx.
local ffi = require "ffi"
local C = require "resv.ffi"

local rawget = rawget
local pairs = pairs
local pcall = pcall
local require = require
local tonumber = tonumber
local tostring = tostring
local min = math.min
local ffi_cast = ffi.cast
local resv_job_done = C.resv_job_done
local resv_job_wait = C.resv_job_wait

local ngx = rawget(_G, "ngx")

-- The phases whose handlers run in a coroutine that ngx.sleep may yield
-- (lua-nginx-module's documentation of ngx.sleep lists these contexts).
local YIELDABLE = {
  rewrite = true,
  access = true,
  content = true,
  timer = true,
  ssl_cert = true,
  ssl_session_fetch = true,
  ssl_client_hello = true,
}

-- The phases where ngx.run_worker_thread may be called.
local THREADABLE = { rewrite = true, access = true, content = true }

local FIRST_STEP = 0.001 -- seconds, backoff
local MAX_STEP = 0.01
local TICK = 0.001       -- seconds, the watcher's period
local SAFETY = 1         -- seconds a woken-up waiter sleeps at most
local THREAD_POOL = "resv"
local THREAD_SLICE_MS = 1000 -- longest wait in a pool thread; then again

local job_ptr = ffi.typeof("resv_job_t *")
local uintptr_t = ffi.typeof("uintptr_t")

local MECHANISMS = { thread = true, watcher = true, backoff = true,
                     block = true }
local chosen = "thread"
local thread_broken    -- why the thread pool cannot be used, once known

local _M = {}

local function job_address(job)
  return tonumber(ffi_cast(uintptr_t, job))
end

function _M.usable()
  if not ngx then
    return false
  end
  local get_phase = ngx.get_phase
  return get_phase ~= nil and YIELDABLE[get_phase()] == true
end

---------------------------------------------------------------------------
-- backoff

local function wait_backoff(job)
  local sleep = ngx.sleep
  local step = FIRST_STEP
  while not resv_job_done(job) do
    sleep(step)
    step = min(step * 2, MAX_STEP)
  end
end

---------------------------------------------------------------------------
-- watcher

local semaphore          -- ngx.semaphore, loaded on first use
local waiters = {}       -- job address -> { job = job, sema = semaphore }
local nwaiters = 0
local watching = false

local function forget(address)
  if waiters[address] ~= nil then
    waiters[address] = nil
    nwaiters = nwaiters - 1
  end
end

local function watch(premature)
  local sleep = ngx.sleep
  while nwaiters > 0 do
    -- Removing the visited entry while traversing is allowed in Lua.
    for address, w in pairs(waiters) do
      if premature or resv_job_done(w.job) then
        forget(address)
        w.sema:post(1)
      end
    end
    if nwaiters == 0 then
      break
    end
    sleep(TICK)
  end
  watching = false
end

local function watcher_available()
  if semaphore == nil then
    local ok, mod = pcall(require, "ngx.semaphore")
    semaphore = ok and mod or false
  end
  return semaphore and ngx.timer ~= nil and ngx.timer.at ~= nil
end

local function wait_watcher(job)
  if not watcher_available() then
    return wait_backoff(job)
  end
  local address = job_address(job)
  local sema = semaphore.new()
  waiters[address] = { job = job, sema = sema }
  nwaiters = nwaiters + 1
  if not watching then
    local ok, err = ngx.timer.at(0, watch)
    if not ok then
      forget(address)
      ngx.log(ngx.WARN, "resv: no watcher timer (", err, "), polling")
      return wait_backoff(job)
    end
    watching = true
  end
  while not resv_job_done(job) do
    sema:wait(SAFETY)
  end
  forget(address)
end

---------------------------------------------------------------------------
-- thread

local pinned = {} -- job address -> job, while a pool thread waits on it

-- Runs in a thread of nginx's pool, in that thread's own Lua state: blocks
-- until the job at address is done or timeout_ms passed.
function _M.thread_wait(address, timeout_ms)
  return resv_job_wait(ffi_cast(job_ptr, address), timeout_ms)
end

local function wait_thread(job)
  local run = ngx.run_worker_thread
  if thread_broken or run == nil or not THREADABLE[ngx.get_phase()] then
    return wait_watcher(job)
  end
  local address = job_address(job)
  pinned[address] = job
  while not resv_job_done(job) do
    local ok, err = run(THREAD_POOL, "resv.ngx", "thread_wait", address,
                        THREAD_SLICE_MS)
    if not ok then
      pinned[address] = nil
      thread_broken = tostring(err)
      ngx.log(ngx.WARN, "resv: ngx.run_worker_thread failed (", thread_broken,
              "); waiting by the watcher from now on. Add `thread_pool ",
              THREAD_POOL, " threads=32;` to nginx.conf's main context.")
      return wait_watcher(job)
    end
  end
  pinned[address] = nil
end

---------------------------------------------------------------------------

local function wait_block(job)
  resv_job_wait(job, -1)
end

local WAIT = {
  thread = wait_thread,
  watcher = wait_watcher,
  backoff = wait_backoff,
  block = wait_block,
}

function _M.wait(job)
  if ngx.run_worker_thread == nil and ngx.timer == nil then
    -- Not a real nginx (a test's fake): only ngx.sleep can be relied on.
    return wait_backoff(job)
  end
  return WAIT[chosen](job)
end

function _M.use(name)
  if not MECHANISMS[name] then
    return nil, "invalid: unknown waiting mechanism " .. tostring(name)
      .. ' (expected "thread", "watcher", "backoff" or "block")'
  end
  chosen = name
  return true
end

function _M.mechanism()
  if chosen == "thread" and thread_broken then
    return "watcher"
  end
  return chosen
end

-- How many calls the watcher and the threads wait for (for /health).
function _M.waiting()
  local n = nwaiters
  for _ in pairs(pinned) do
    n = n + 1
  end
  return n
end

-- Replaces the ngx table this module uses (nil: none). For tests.
function _M._use(fake_ngx)
  ngx = fake_ngx
end

return _M

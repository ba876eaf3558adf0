-- resv.ngx: waiting for a job inside OpenResty without blocking the worker.
--
-- The interface resv.lua uses is two functions, so the mechanism can
-- change without touching it:
--   usable()  true when the running code is in an nginx phase whose
--             coroutine may yield;
--   wait(job) returns true once resv_job_done(job), or false once the
--             job's deadline plus grace (resv_job_deadline) has passed,
--             yielding meanwhile.
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
-- A job a pool thread waits on holds a C reference of that thread's
-- (resv_job_ref before the thread starts, resv_job_unref when it returns),
-- so the job outlives the wait even when the request's coroutine is gone
-- (a client abort with lua_check_client_abort on kills it mid-wait): the
-- collector frees the job's Lua side as for any dropped call (resv.type:
-- a waiting job carries ffi.gc(job, resv_job_destroy)), and nothing stays
-- pinned. The watcher keeps its waiters until their job is done or past
-- its deadline.
--
-- `ngx` is looked up when the module loads (lua-nginx-module sets it before
-- any Lua code runs); _use() replaces it, for tests outside nginx.
local ffi = require "ffi"
local C = require "resv.ffi"

local rawget = rawget
local pairs = pairs
local setmetatable = setmetatable
local pcall = pcall
local require = require
local tonumber = tonumber
local tostring = tostring
local min = math.min
local ffi_cast = ffi.cast
local resv_job_done = C.resv_job_done
local resv_job_wait = C.resv_job_wait
local resv_job_deadline = C.resv_job_deadline
local resv_job_ref = C.resv_job_ref
local resv_job_unref = C.resv_job_unref
local resv_clock_ms = C.resv_clock_ms
local job_address = require("resv.base").job_address

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

local MECHANISMS = { thread = true, watcher = true, backoff = true,
                     block = true }
local chosen = "thread"
local thread_broken    -- why the thread pool cannot be used, once known

local _M = {}

-- Milliseconds until job's waiter gives up (<= 0: now).
local function left_ms(job)
  return tonumber(resv_job_deadline(job) - resv_clock_ms())
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
    local left = left_ms(job)
    if left <= 0 then
      return false
    end
    sleep(min(step, left / 1000))
    step = min(step * 2, MAX_STEP)
  end
  return true
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
      if premature or resv_job_done(w.job) or left_ms(w.job) <= 0 then
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
    local left = left_ms(job)
    if left <= 0 then
      break
    end
    sema:wait(min(SAFETY, left / 1000))
  end
  forget(address)
  return resv_job_done(job)
end

---------------------------------------------------------------------------
-- thread

-- The jobs pool threads wait on, for waiting(): weak, so a job whose
-- request is gone leaves once collected.
local threaded = setmetatable({}, { __mode = "k" })

-- Runs in a thread of nginx's pool, in that thread's own Lua state: blocks
-- until the job at address is done or timeout_ms passed, then drops the
-- reference wait_thread took for it.
function _M.thread_wait(address, timeout_ms)
  local job = ffi_cast(job_ptr, address)
  local done = resv_job_wait(job, timeout_ms)
  resv_job_unref(job)
  return done
end

local function wait_thread(job)
  local run = ngx.run_worker_thread
  if thread_broken or run == nil or not THREADABLE[ngx.get_phase()] then
    return wait_watcher(job)
  end
  local address = job_address(job)
  threaded[job] = true
  while not resv_job_done(job) do
    local left = left_ms(job)
    if left <= 0 then
      break
    end
    resv_job_ref(job)
    local ok, err = run(THREAD_POOL, "resv.ngx", "thread_wait", address,
                        min(THREAD_SLICE_MS, left))
    if not ok then
      -- The thread never ran: its reference is ours to drop.
      resv_job_unref(job)
      threaded[job] = nil
      thread_broken = tostring(err)
      ngx.log(ngx.WARN, "resv: ngx.run_worker_thread failed (", thread_broken,
              "); waiting by the watcher from now on. Add `thread_pool ",
              THREAD_POOL, " threads=32;` to nginx.conf's main context.")
      return wait_watcher(job)
    end
  end
  threaded[job] = nil
  return resv_job_done(job)
end

---------------------------------------------------------------------------

local function wait_block(job)
  local left = left_ms(job)
  return resv_job_wait(job, left > 0 and left or 0)
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

-- How many calls the watcher and the threads wait for (for /health). A
-- call whose request was aborted counts until its job is collected.
function _M.waiting()
  local n = nwaiters
  for _ in pairs(threaded) do
    n = n + 1
  end
  return n
end

-- Replaces the ngx table this module uses (nil: none). For tests.
function _M._use(fake_ngx)
  ngx = fake_ngx
end

return _M

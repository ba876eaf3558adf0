-- resv.ngx: waiting for a job inside OpenResty without blocking the worker.
--
-- It is the waiter resv.host picks when a global `ngx` with ngx.get_phase
-- is there (the interface is described in resv.host); resv.type calls
--   usable()               true in an nginx phase whose coroutine may
--                          yield (elsewhere the call blocks the worker,
--                          logged once per phase);
--   inbox()                the worker's inbox, when the "inbox" mechanism
--                          can work here, else nil;
--   wait(job, in_inbox, now) true once the job is done, false once its
--                          deadline plus grace (resv_job_deadline) has
--                          passed, yielding meanwhile;
-- resv.lua calls present() (true in any phase: none may block) and
-- check_pool() (when a store whose calls wait opens). For the nginx
-- configuration, benchmarks and /health:
--   use(name)    picks the mechanism; true, or nil and an error;
--   mechanism()  the name of the mechanism in use;
--   waiting()    how many calls wait;
-- and the helpers of resv/ngx_worker.lua (open_in_worker, type, unavailable,
-- serve_metrics, ...), which load that file on their first use.
-- The functions a pool thread runs (thread_wait, inbox_wait) load this
-- module in that thread's own Lua state, where they use only resv.ffi
-- and resv.base.
--
-- The mechanisms (examples/openresty/README.md has the measurements that
-- chose the default):
--
--   "inbox"    the default. The worker's calls finish into one inbox of
--              its own; one waiting request at a time (the leader) hands
--              a wait on the inbox's descriptor to a thread of nginx's pool
--              (ngx.run_worker_thread on resv_inbox_wait), and when any
--              call finishes it drains the inbox and wakes each finished
--              call's request through its ngx.semaphore, then goes on
--              leading or hands the lead to another waiter. So a ready
--              answer resumes its request at once however many calls are
--              slow, and a worker holds one pool thread however many calls
--              wait. A leader whose request is gone (a client abort kills
--              it mid-wait) is replaced once its lease runs out. Outside
--              rewrite, access and content (timers), and without the
--              thread pool, it waits as "watcher".
--   "thread"   The request's coroutine hands the wait to
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
-- While any call waits by "inbox" or "thread", a keeper timer sleeps in
-- steps of KEEP seconds: nginx lets an old worker exit at a reload or a
-- graceful quit once no timer is left, and a request parked in
-- ngx.run_worker_thread holds none, so without the keeper its call would be
-- dropped unanswered (the watcher and backoff hold timers of their own).
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
-- any Lua code runs); _use() replaces it and makes this module the host's
-- waiter, for tests outside nginx.
local ffi = require "ffi"
local C = require "resv.ffi"

local rawget = rawget
local pairs = pairs
local ipairs = ipairs
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
local resv_inbox_new = C.resv_inbox_new
local resv_inbox_destroy = C.resv_inbox_destroy
local resv_inbox_drain = C.resv_inbox_drain
local resv_inbox_wait = C.resv_inbox_wait
local resv_process_generation = C.resv_process_generation
local base = require "resv.base"
local job_address = base.job_address
local error_string = base.error_string
local err_buf = base.err_buf
local next = next
local ffi_gc = ffi.gc
local ffi_new = ffi.new

local ngx = rawget(_G, "ngx")
-- Only ngx.sleep can be relied on: an ngx with neither pool threads nor
-- timers (a test's fake).
local sleep_only = ngx ~= nil and ngx.run_worker_thread == nil and ngx.timer == nil

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
-- The inbox's leader waits in slices, so a leader whose request is gone
-- is replaced within a lease: a slice and the time a loaded worker takes
-- to resume a coroutine.
local INBOX_SLICE_MS = 250
local LEASE_MS = INBOX_SLICE_MS + 250
local KEEP = 0.1         -- seconds, the keeper's step
local DRAIN_MAX = 64

local job_ptr = ffi.typeof("resv_job_t *")
local inbox_ptr = ffi.typeof("resv_inbox_t *")

local MECHANISMS = { inbox = true, thread = true, watcher = true,
                     backoff = true, block = true }
local chosen = "inbox"
local thread_broken    -- why the thread pool cannot be used, once known

local _M = {}

-- The clock of deadlines (resv_clock_ms) as a Lua number.
local function now_ms()
  return tonumber(resv_clock_ms())
end

-- Milliseconds until until_ms (<= 0: past).
local function left_ms(until_ms)
  return until_ms - now_ms()
end

local warned = {} -- phase -> true once a blocking call there was logged

-- True when the running code is in nginx (any phase: none may block).
function _M.present()
  return ngx ~= nil and ngx.get_phase ~= nil
end

-- True when the running code is in an nginx phase whose coroutine may
-- yield. In a phase that cannot (init_worker, set, header_filter, log,
-- ...) the call will block the worker: that is logged once per phase.
function _M.usable()
  if not ngx then
    return false
  end
  local get_phase = ngx.get_phase
  if get_phase == nil then
    return false
  end
  local phase = get_phase()
  if YIELDABLE[phase] then
    return true
  end
  if not warned[phase] and ngx.log ~= nil then
    warned[phase] = true
    ngx.log(ngx.WARN, "resv: a call in nginx's ", phase, " phase cannot yield and ",
            "blocks the worker until it answers; make it in rewrite, access or ",
            "content, or hand it to a timer (ngx.timer.at), which can wait")
  end
  return false
end

---------------------------------------------------------------------------
-- keeper

-- The jobs of calls waiting by "inbox" or "thread" (weak: the job of a
-- request that is gone leaves once collected), and the latest deadline
-- among them: the keeper stops when no such call is left, or at the latest
-- at that deadline.
local kept = setmetatable({}, { __mode = "k" })
local keep_until = 0
local keeping = false

local drain_orphans -- the inbox's: wakes finished calls when no one leads

local function keep(premature)
  local sleep = ngx.sleep
  while not premature and now_ms() < keep_until do
    local orphans = drain_orphans()
    if not orphans and next(kept) == nil then
      break
    end
    sleep(KEEP)
  end
  keeping = false
end

local function keep_alive(job, until_ms)
  kept[job] = true
  if until_ms > keep_until then
    keep_until = until_ms
  end
  if not keeping and ngx.timer ~= nil then
    keeping = ngx.timer.at(0, keep) and true or false
  end
end

---------------------------------------------------------------------------
-- backoff

local function wait_backoff(job, until_ms)
  local sleep = ngx.sleep
  local step = FIRST_STEP
  while not resv_job_done(job) do
    local left = left_ms(until_ms)
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
local waiters = {}       -- job address -> { job, sema, until_ms }
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
      if premature or resv_job_done(w.job) or left_ms(w.until_ms) <= 0 then
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

local function wait_watcher(job, until_ms)
  if not watcher_available() then
    return wait_backoff(job, until_ms)
  end
  local address = job_address(job)
  local sema = semaphore.new()
  waiters[address] = { job = job, sema = sema, until_ms = until_ms }
  nwaiters = nwaiters + 1
  if not watching then
    local ok, err = ngx.timer.at(0, watch)
    if not ok then
      forget(address)
      ngx.log(ngx.WARN, "resv: no watcher timer (", err, "), polling")
      return wait_backoff(job, until_ms)
    end
    watching = true
  end
  while not resv_job_done(job) do
    local left = left_ms(until_ms)
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

-- The thread pool cannot be used (no `thread_pool resv`): from now on the
-- calls wait by the watcher; said once, with how to mend it.
local function pool_broken(err)
  thread_broken = tostring(err)
  ngx.log(ngx.WARN, "resv: the thread pool cannot be used (", thread_broken,
          "); waiting by the watcher from now on. Add `thread_pool ",
          THREAD_POOL, " threads=4;` to nginx.conf's main context.")
end

-- nginx's own lookup of a thread pool by name (ngx_thread_pool_get, in
-- src/core/ngx_thread_pool.c), which nginx exports for its dynamic
-- modules, and the current cycle it looks in. nil where this process has
-- none of it (outside nginx, or an nginx built without threads): the first
-- call that needs the pool then finds out.
local pool_lookup
do
  local declared = pcall(ffi.cdef, [[
    typedef struct { size_t len; const char *data; } resv_ngx_str_t;
    void *ngx_thread_pool_get(void *cycle, resv_ngx_str_t *name);
    void *ngx_cycle;
  ]])
  if declared and pcall(function() return ffi.C.ngx_thread_pool_get, ffi.C.ngx_cycle end) then
    pool_lookup = function(name)
      local cycle = ffi.C.ngx_cycle
      if cycle == nil then
        return true -- no cycle yet: cannot tell
      end
      return ffi.C.ngx_thread_pool_get(cycle, ffi_new("resv_ngx_str_t", #name, name)) ~= nil
    end
  end
end

-- Reports a missing `thread_pool resv` when a store whose calls wait opens
-- (in init_worker, where the README opens it), rather than at the first
-- call: ngx.run_worker_thread, which would say so, may run in rewrite,
-- access and content only. Calls then wait by the watcher from the start.
function _M.check_pool()
  if not ngx or thread_broken or pool_lookup == nil
     or (chosen ~= "inbox" and chosen ~= "thread") then
    return
  end
  local ok, found = pcall(pool_lookup, THREAD_POOL)
  if ok and not found then
    pool_broken("nginx.conf has no `thread_pool " .. THREAD_POOL .. "`")
  end
end

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

local function wait_thread(job, until_ms)
  local run = ngx.run_worker_thread
  if thread_broken or run == nil or not THREADABLE[ngx.get_phase()] then
    return wait_watcher(job, until_ms)
  end
  local address = job_address(job)
  threaded[job] = true
  keep_alive(job, until_ms)
  while not resv_job_done(job) do
    local left = left_ms(until_ms)
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
      kept[job] = nil
      pool_broken(err)
      return wait_watcher(job, until_ms)
    end
  end
  threaded[job] = nil
  kept[job] = nil
  return resv_job_done(job)
end

---------------------------------------------------------------------------
-- inbox

local inbox              -- this worker's resv_inbox_t *, made on first use
local inbox_generation   -- the fork generation it was made in
local inbox_waiters = {} -- job address -> semaphore of the request waiting
local ninbox = 0
local lease_until        -- while a leader waits: when its lease runs out
local drained = ffi_new("resv_job_t *[?]", DRAIN_MAX)

-- The inbox calls made in this worker finish into, when "inbox" is in use
-- and can work here (nil otherwise: then the call waits some other way).
function _M.inbox()
  if chosen ~= "inbox" or thread_broken or not watcher_available()
     or ngx.run_worker_thread == nil or not THREADABLE[ngx.get_phase()] then
    return nil
  end
  local generation = resv_process_generation()
  if inbox == nil or inbox_generation ~= generation then
    -- Made in the worker, never in the master: a reload's new workers and
    -- a forked child each make their own.
    local made = resv_inbox_new(err_buf)
    if made == nil then
      ngx.log(ngx.WARN, "resv: no inbox (", error_string(err_buf), "); waiting by the watcher")
      return nil
    end
    inbox, inbox_generation = ffi_gc(made, resv_inbox_destroy), generation
    inbox_waiters, ninbox, lease_until = {}, 0, nil
  end
  return inbox
end

-- Runs in a thread of nginx's pool: waits up to timeout_ms for a finished
-- call in the inbox at address (the worker's, alive as long as the worker).
function _M.inbox_wait(address, timeout_ms)
  return resv_inbox_wait(ffi_cast(inbox_ptr, address), timeout_ms)
end

-- Takes the call of job address off the waiters; its semaphore, or nil
-- when it was not waiting (any more).
local function unwait(address)
  local sema = inbox_waiters[address]
  if sema ~= nil then
    inbox_waiters[address] = nil
    ninbox = ninbox - 1
  end
  return sema
end

-- Wakes the request of every finished call in the inbox, taking it off the
-- waiters: a waiter whose entry is gone knows its job is done.
local function drain_inbox()
  repeat
    local n = tonumber(resv_inbox_drain(inbox, drained, DRAIN_MAX))
    for i = 0, n - 1 do
      local address = job_address(drained[i])
      local sema = unwait(address)
      if sema ~= nil then
        sema:post(1)
      end
    end
  until n < DRAIN_MAX
end

-- Drains the inbox when no leader is waiting on it (the leader's request
-- may be gone): true while calls still wait in it.
function drain_orphans()
  if ninbox > 0 and (lease_until == nil or now_ms() > lease_until) then
    drain_inbox()
  end
  return ninbox > 0
end

-- Leads from now (ms): waits on the inbox in a pool thread for up to ms,
-- then wakes the finished calls' requests. False when the thread pool
-- cannot be used.
local function lead(now, ms)
  lease_until = now + LEASE_MS
  local ok, err = ngx.run_worker_thread(THREAD_POOL, "resv.ngx", "inbox_wait",
                                        job_address(inbox), ms)
  lease_until = nil
  if not ok then
    pool_broken(err)
  end
  drain_inbox()
  return ok
end

local function wait_inbox(job, until_ms, now)
  local address = job_address(job)
  local sema = semaphore.new()
  inbox_waiters[address] = sema
  ninbox = ninbox + 1
  keep_alive(job, until_ms)
  local done = false
  while now < until_ms do
    local left = until_ms - now
    if lease_until == nil or now > lease_until then
      if not lead(now, min(INBOX_SLICE_MS, left)) then
        -- The pool is not there: the watcher takes this call over.
        unwait(address)
        kept[job] = nil
        return wait_watcher(job, until_ms)
      end
    else
      sema:wait(min(left, LEASE_MS) / 1000)
    end
    if inbox_waiters[address] ~= sema then
      done = true
      break
    end
    now = now_ms()
  end
  unwait(address)
  -- Hand the lead on: wake one call still waiting, which finds no leader.
  if lease_until == nil then
    local _, other = next(inbox_waiters)
    if other ~= nil then
      other:post(1)
    end
  end
  kept[job] = nil
  return done or resv_job_done(job)
end

---------------------------------------------------------------------------

local function wait_block(job, until_ms)
  local left = left_ms(until_ms)
  return resv_job_wait(job, left > 0 and left or 0)
end

local WAIT = {
  thread = wait_thread,
  watcher = wait_watcher,
  backoff = wait_backoff,
  block = wait_block,
}

-- in_inbox: the job was submitted with _M.inbox(); the others wait by the
-- watcher when "inbox" is chosen. now: resv_clock_ms() shortly before.
function _M.wait(job, in_inbox, now)
  local until_ms = tonumber(resv_job_deadline(job))
  if sleep_only then
    return wait_backoff(job, until_ms)
  end
  if chosen == "inbox" then
    if in_inbox then
      return wait_inbox(job, until_ms, tonumber(now))
    end
    return wait_watcher(job, until_ms)
  end
  return WAIT[chosen](job, until_ms)
end

function _M.use(name)
  if not MECHANISMS[name] then
    return nil, "invalid: unknown waiting mechanism " .. tostring(name)
      .. ' (expected "inbox", "thread", "watcher", "backoff" or "block")'
  end
  chosen = name
  return true
end

function _M.mechanism()
  if (chosen == "thread" or chosen == "inbox") and thread_broken then
    return "watcher"
  end
  return chosen
end

-- How many calls the watcher and the threads wait for (for /health). A
-- call whose request was aborted counts until its job is collected.
function _M.waiting()
  local n = nwaiters + ninbox
  for _ in pairs(threaded) do
    n = n + 1
  end
  return n
end

-- The helpers of an nginx.conf (resv/ngx_worker.lua), loaded on first use.
for _, name in ipairs { "open_in_worker", "store", "type", "unavailable",
                        "publish_metrics", "serve_metrics" } do
  _M[name] = function(...) return require("resv.ngx_worker")[name](...) end
end

-- Replaces the ngx table this module uses, and makes this module the
-- host's waiter (nil: none, and the host found at load again). For tests.
function _M._use(fake_ngx)
  ngx = fake_ngx
  sleep_only = ngx ~= nil and ngx.run_worker_thread == nil and ngx.timer == nil
  local host = require "resv.host"
  if fake_ngx == nil then
    host._use(nil)
  else
    host._use(_M, "ngx")
  end
end

return _M

-- resv.ngx: waiting for a job inside OpenResty without blocking the worker.
--
-- The interface is two functions, so the mechanism can change without
-- touching resv.lua:
--   usable()  true when the running code is in an nginx phase whose
--             coroutine may yield (ngx.sleep works there);
--   wait(job) returns once resv_job_done(job), yielding meanwhile.
--
-- This first mechanism polls the job with ngx.sleep, the delay doubling
-- from 1 ms to 10 ms, as lua-resty-lock waits for a lock: simple, and each
-- waiting request costs one nginx timer per step. A later one may keep a
-- per-worker watcher on the inbox's descriptor and wake requests through
-- ngx.semaphore instead.
--
-- `ngx` is looked up when the module loads (lua-nginx-module sets it before
-- any Lua code runs); _use() replaces it, for tests outside nginx.
local C = require "resv.ffi"

local rawget = rawget
local min = math.min
local resv_job_done = C.resv_job_done

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

local FIRST_STEP = 0.001 -- seconds
local MAX_STEP = 0.01

local _M = {}

function _M.usable()
  if not ngx then
    return false
  end
  local get_phase = ngx.get_phase
  return get_phase ~= nil and YIELDABLE[get_phase()] == true
end

function _M.wait(job)
  local sleep = ngx.sleep
  local step = FIRST_STEP
  while not resv_job_done(job) do
    sleep(step)
    step = min(step * 2, MAX_STEP)
  end
end

-- Replaces the ngx table this module uses (nil: none). For tests.
function _M._use(fake_ngx)
  ngx = fake_ngx
end

return _M

-- resv.type: an aggregate type's calls (reserve, confirm, abandon, release,
-- get, sweep; scan and put for tools come from resv/tools.lua) and their answers.
--
-- Each method reads every field of its key and owner exactly once, into
-- locals (a single-key call) or a request table (a shape's, below), checks
-- them, and hands them to C as arguments of the FFI call: LuaJIT keeps a call's arguments alive for the call, and
-- resv_submit_args copies them before it returns. No pointer into a Lua
-- string is ever kept in a struct field, where the collector would not see
-- it (docs/design.md section 9: temporaries and __index-computed fields
-- are fine); put, whose C call takes a struct, keeps its strings in a
-- local until C is done.
--
-- The call then waits for its answer in the way the caller's context
-- allows:
--   * in a coroutine started by resv.spawn: submit the job to the
--     scheduler's inbox and yield; resv.poll()/resv.run() resume it
--     (resv.sched);
--   * where the host's waiter says the running code may yield (resv.host:
--     OpenResty in a phase that may yield, Tarantool in any fiber): submit
--     the job and let the waiter wait for it without blocking the host;
--   * anywhere else: resv_call_args, which blocks until the answer or the
--     call's deadline.
-- A store that answers inline (the memory store) is called directly in
-- every context: its answer is there at once. A file store with sync =
-- "process" is tried on the caller's thread first (resv_try_call_args),
-- which answers unless the write would have to wait for another writer;
-- only then does the call wait as the context allows. A waiter gives up
-- at the job's deadline plus a grace (resv_job_deadline) and the call
-- answers `timeout`. A waited call crosses into C for: the clock, the
-- submit, one look at the job, its deadline, its answer (and its error
-- when there is none), its destroy; plus what the waiter needs to be woken.
local ffi = require "ffi"
local C = require "resv.ffi"
local base = require "resv.base"
local sched = require "resv.sched"
local host = require "resv.host"

local error = error
local type = type
local next = next
local tostring = tostring
local tonumber = tonumber
local getmetatable = getmetatable
local setmetatable = setmetatable
local ffi_gc = ffi.gc
local ffi_new = ffi.new
local ffi_string = ffi.string

local resv_call_args = C.resv_call_args
local resv_submit_args = C.resv_submit_args
local resv_try_call_args = C.resv_try_call_args
local resv_job_done = C.resv_job_done
local resv_job_error = C.resv_job_error
local resv_job_answer = C.resv_job_answer
local resv_job_destroy = C.resv_job_destroy
local resv_answer_clear = C.resv_answer_clear
local resv_type_collection = C.resv_type_collection
local resv_clock_ms = C.resv_clock_ms

local error_string = base.error_string
local expected = base.expected
local check_integer = base.check_integer
local err_buf = base.err_buf
local MAX_INTEGER = base.MAX_INTEGER
local MAX_TIMEOUT_MS = base.MAX_TIMEOUT_MS
local spawned_inbox = sched.spawned_inbox
local host_waiter = host.waiter

-- The answer of an inline call, read back at once.
local answer_buf = ffi_gc(ffi_new("resv_answer_t"), resv_answer_clear)

local OP_RESERVE = C.RESV_OP_RESERVE
local OP_CONFIRM = C.RESV_OP_CONFIRM
local OP_ABANDON = C.RESV_OP_ABANDON
local OP_RELEASE = C.RESV_OP_RELEASE
local OP_GET = C.RESV_OP_GET
local OP_SWEEP = C.RESV_OP_SWEEP

local answer = require "resv.answer"
local status_names = answer.status_names
local answer_table = answer.table

local Type = {}
Type.__index = Type

local _M = {}

-- A type object over the C handle h of store (a Lua store object, which
-- the type keeps alive: the handle belongs to it). inline: every call
-- answers at once; tries: a call may answer at once (resv_try_call_args).
function _M.new(h, store, inline, tries)
  return setmetatable({ handle = h, store = store, inline = inline,
                        tries = tries and not inline }, Type)
end

-- A job whose waiter gave up at its deadline: the worker still running it
-- frees it when it ends, and nobody reads its answer.
local function give_up(job, started)
  ffi_gc(job, nil)
  resv_job_destroy(job)
  return nil, "timeout: no answer within " .. tonumber(resv_clock_ms() - started) .. " ms"
end

---------------------------------------------------------------------------
-- Arguments

-- The per-call options { timeout_ms = n, into = t }: the call's deadline
-- in ms, or 0 for the store's, and the table to answer into, or nil.
-- Returns them, or nil and an error.
local KNOWN_OPTION = { timeout_ms = true, into = true }
local function call_opts(opts)
  if opts == nil then
    return 0
  end
  if type(opts) ~= "table" then
    return nil, expected("options", "a table", opts)
  end
  -- At most two fields, both known (three next()s: a loop here would stop
  -- the JIT compiler at its unroll limit and run the call interpreted).
  local name = next(opts)
  if name ~= nil and KNOWN_OPTION[name] then
    name = next(opts, name)
    if name ~= nil and KNOWN_OPTION[name] then
      name = next(opts, name)
    end
  end
  if name ~= nil then
    return nil, "invalid: unknown call option " .. tostring(name)
  end
  local into = opts.into
  if into ~= nil and type(into) ~= "table" then
    return nil, expected("into", "a table", into)
  end
  local ms = opts.timeout_ms
  if ms == nil then
    return 0, into
  end
  local err
  ms, err = check_integer("timeout_ms", ms, 1, MAX_TIMEOUT_MS,
                          "an integer from 1 to " .. MAX_TIMEOUT_MS)
  if not ms then
    return nil, err
  end
  return ms, into
end

-- Checks a string read from a caller's table (nil takes the default).
local function string_field(what, s, default)
  if s == nil and default ~= nil then
    return default
  end
  if type(s) ~= "string" then
    return nil, expected(what, "a string", s)
  end
  return s
end

-- A key table's fields, each read once: tenant, namespace, key; or nil and
-- an error.
local function key_fields(key)
  if type(key) ~= "table" then
    return nil, expected("key", "a table", key)
  end
  local tenant, ns, k = key.tenant, key.namespace, key.key
  local err
  tenant, err = string_field("key.tenant", tenant, "")
  if not tenant then return nil, err end
  ns, err = string_field("key.namespace", ns)
  if not ns then return nil, err end
  k, err = string_field("key.key", k)
  if not k then return nil, err end
  return tenant, ns, k
end

-- An owner table's fields, each read once: tenant, id; or nil and an error.
local function owner_fields(owner)
  if type(owner) ~= "table" then
    return nil, expected("owner", "a table", owner)
  end
  local tenant, id = owner.tenant, owner.id
  local err
  tenant, err = string_field("owner.tenant", tenant, "")
  if not tenant then return nil, err end
  id, err = string_field("owner.id", id)
  if not id then return nil, err end
  return tenant, id
end

---------------------------------------------------------------------------
-- The call

-- A shape says how a request (a table of a call's checked arguments, each
-- read once from the caller's tables) reaches C and how its answer comes
-- back: call (blocks), try (answers on this thread or says it would wait),
-- submit (a job into an inbox), answer (a resv_answer_t to a table). Each
-- passes the request's strings as arguments of the FFI call, which LuaJIT
-- keeps alive for the call: C reads them only during it or copies them
-- before it returns (resv_submit_args). ONE's request (sweep's): op, ttl,
-- version, kt, kn, kk, ot, oid, attempt, mine (the answer may reuse ot, oid).
local ONE = {}

function ONE.call(h, r, timeout, answer)
  return resv_call_args(h, r.op, r.ttl, r.version, timeout, #r.kt, r.kt, #r.kn, r.kn,
                        #r.kk, r.kk, #r.ot, r.ot, #r.oid, r.oid,
                        #r.attempt, r.attempt, answer, err_buf)
end

function ONE.try(h, r, timeout, answer)
  return resv_try_call_args(h, r.op, r.ttl, r.version, timeout, #r.kt, r.kt, #r.kn, r.kn,
                            #r.kk, r.kk, #r.ot, r.ot, #r.oid, r.oid,
                            #r.attempt, r.attempt, answer, err_buf)
end

function ONE.submit(h, r, timeout, inbox)
  return resv_submit_args(h, r.op, r.ttl, r.version, timeout, #r.kt, r.kt, #r.kn, r.kn,
                          #r.kk, r.kk, #r.ot, r.ot, #r.oid, r.oid,
                          #r.attempt, r.attempt, inbox, err_buf)
end

-- Only a reserve's or confirm's answer may reuse the request's owner.
function ONE.answer(a, r, into)
  if r.mine then
    return answer_table(a, r.ot, r.oid, r.attempt, into)
  end
  return answer_table(a, nil, r.oid, r.attempt, into)
end

-- The error of a finished job that has no answer.
local function job_failure(job)
  local err = resv_job_error(job)
  if err ~= nil and err.code ~= 0 then
    return error_string(err)
  end
  return "server: the job finished without an answer"
end

-- Reads a finished job, frees it and returns the answer or nil, err.
local function finish_job(job, shape, r, into)
  local res, msg
  local a = resv_job_answer(job)
  if a ~= nil then
    res = shape.answer(a, r, into)
  else
    msg = job_failure(job)
  end
  ffi_gc(job, nil)
  resv_job_destroy(job)
  return res, msg
end

-- Submits the request and waits for its job with waiter w (resv.sched's,
-- or the host's) without blocking, into inbox (nil: w waits without one).
local function wait_call(t, shape, r, timeout, into, w, inbox)
  local started = resv_clock_ms()
  local job = shape.submit(t.handle, r, timeout, inbox)
  if job == nil then
    return nil, error_string(err_buf)
  end
  if not resv_job_done(job) then
    -- Should the waiting coroutine be dropped (an aborted request), the
    -- collector frees the job; resv_job_destroy copes with running jobs.
    job = ffi_gc(job, resv_job_destroy)
    if not w.wait(job, inbox ~= nil, started) then
      return give_up(job, started)
    end
  end
  return finish_job(job, shape, r, into)
end

-- Runs request r of the given shape on type t and waits as the context
-- allows; timeout and into are the checked options. tried: the caller
-- has tried the call on this thread already (it would wait).
local function call_checked(t, shape, r, timeout, into, tried)
  if t.tries and not tried then
    if shape.try(t.handle, r, timeout, answer_buf) then
      return shape.answer(answer_buf, r, into)
    end
    if err_buf.code ~= 0 then
      return nil, error_string(err_buf)
    end -- else it would wait for another writer: as below
  end
  if not t.inline then
    local inbox, err = spawned_inbox()
    if inbox then
      return wait_call(t, shape, r, timeout, into, sched, inbox)
    elseif inbox == nil then
      return nil, err
    elseif host_waiter.usable() then
      return wait_call(t, shape, r, timeout, into, host_waiter, host_waiter.inbox())
    end
  end
  if not shape.call(t.handle, r, timeout, answer_buf) then
    return nil, error_string(err_buf)
  end
  return shape.answer(answer_buf, r, into)
end

local function call(t, shape, r, opts)
  local timeout, into = call_opts(opts)
  if not timeout then return nil, into end -- (then into is the error)
  return call_checked(t, shape, r, timeout, into)
end

-- A single-key call (reserve, confirm, abandon, release, get) runs as
-- call() runs a shape, its request's fields as arguments, not a table: a
-- call that waits keeps them on its own stack while parked, and allocates
-- nothing for them. aot: the owner's tenant when the answer may reuse the
-- owner (a reserve or confirm), else nil. wait_one waits as wait_call.
local function wait_one(h, timeout, into, w, inbox, op, ttl, version,
                        kt, kn, kk, ot, oid, attempt, aot)
  local started = resv_clock_ms()
  local job = resv_submit_args(h, op, ttl, version, timeout, #kt, kt, #kn, kn,
                               #kk, kk, #ot, ot, #oid, oid,
                               #attempt, attempt, inbox, err_buf)
  if job == nil then
    return nil, error_string(err_buf)
  end
  if not resv_job_done(job) then
    job = ffi_gc(job, resv_job_destroy)
    if not w.wait(job, inbox ~= nil, started) then
      return give_up(job, started)
    end
  end
  local res, msg
  local a = resv_job_answer(job)
  if a ~= nil then
    res = answer_table(a, aot, oid, attempt, into)
  else
    msg = job_failure(job)
  end
  ffi_gc(job, nil)
  resv_job_destroy(job)
  return res, msg
end

local function one(t, opts, op, ttl, version, kt, kn, kk, ot, oid, attempt, aot)
  local timeout, into = call_opts(opts)
  if not timeout then return nil, into end -- (then into is the error)
  local h = t.handle
  if t.tries then
    if resv_try_call_args(h, op, ttl, version, timeout, #kt, kt, #kn, kn,
                          #kk, kk, #ot, ot, #oid, oid,
                          #attempt, attempt, answer_buf, err_buf) then
      return answer_table(answer_buf, aot, oid, attempt, into)
    end
    if err_buf.code ~= 0 then
      return nil, error_string(err_buf)
    end
  end
  if not t.inline then
    local inbox, err = spawned_inbox()
    if inbox then
      return wait_one(h, timeout, into, sched, inbox, op, ttl, version,
                      kt, kn, kk, ot, oid, attempt, aot)
    elseif inbox == nil then
      return nil, err
    elseif host_waiter.usable() then
      return wait_one(h, timeout, into, host_waiter, host_waiter.inbox(), op, ttl,
                      version, kt, kn, kk, ot, oid, attempt, aot)
    end
  end
  if not resv_call_args(h, op, ttl, version, timeout, #kt, kt, #kn, kn,
                        #kk, kk, #ot, ot, #oid, oid,
                        #attempt, attempt, answer_buf, err_buf) then
    return nil, error_string(err_buf)
  end
  return answer_table(answer_buf, aot, oid, attempt, into)
end

---------------------------------------------------------------------------
-- Methods

local function check_type(self, method)
  if getmetatable(self) ~= Type then
    error("resv: " .. method .. " must be called on a type object "
          .. "(store:type(...)), as t:" .. method .. "(...)", 3)
  end
end

function Type:reserve(key, owner, attempt, ttl_ms, opts)
  check_type(self, "reserve")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  if type(attempt) ~= "string" then
    return nil, expected("attempt", "a string", attempt)
  end
  local ttl, err = check_integer("ttl_ms", ttl_ms, 1, MAX_INTEGER,
                                 "a positive integer (milliseconds)")
  if not ttl then return nil, err end
  return one(self, opts, OP_RESERVE, ttl, 0, kt, kn, kk, ot, oid, attempt, ot)
end

function Type:confirm(key, owner, version, opts)
  check_type(self, "confirm")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  local v, err = check_integer("version", version, 0, MAX_INTEGER,
                               "a non-negative integer", true)
  if not v then return nil, err end
  return one(self, opts, OP_CONFIRM, 0, v, kt, kn, kk, ot, oid, "", ot)
end

function Type:abandon(key, owner, attempt, opts)
  check_type(self, "abandon")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  if type(attempt) ~= "string" then
    return nil, expected("attempt", "a string", attempt)
  end
  return one(self, opts, OP_ABANDON, 0, 0, kt, kn, kk, ot, oid, attempt, nil)
end

function Type:release(key, owner, opts)
  check_type(self, "release")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  return one(self, opts, OP_RELEASE, 0, 0, kt, kn, kk, ot, oid, "", nil)
end

function Type:get(key, opts)
  check_type(self, "get")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  return one(self, opts, OP_GET, 0, 0, kt, kn, kk, "", "", "", nil)
end

local SWEEP = { op = OP_SWEEP, ttl = 0, version = 0, kt = "", kn = "", kk = "",
                ot = "", oid = "", attempt = "", mine = false }

-- Deletes the type's pending reservations expired for sweep_grace_ms or
-- more: { status = "swept", count = n }, or nil, err.
function Type:sweep(opts)
  check_type(self, "sweep")
  return call(self, ONE, SWEEP, opts)
end

-- The MongoDB collection of the type ("wow_reservation__<c>__<a>").
function Type:collection()
  check_type(self, "collection")
  return ffi_string(resv_type_collection(self.handle))
end

function Type:__tostring()
  return "resv.type: " .. ffi_string(resv_type_collection(self.handle))
end

-- The tools' calls (resv/tools.lua): scan and put.
require("resv.tools").install(Type, {
  key_fields = key_fields, owner_fields = owner_fields, check_type = check_type,
})

-- The calls of several keys at once (resv/all.lua).
require("resv.all").install(Type, {
  key_fields = key_fields, owner_fields = owner_fields, check_type = check_type,
  answer_table = answer_table, status_names = status_names, call_opts = call_opts,
  answer_buf = answer_buf, run = call, run_checked = call_checked,
})

_M.Type = Type

return _M

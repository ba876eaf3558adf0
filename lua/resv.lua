-- resv: unique-key reservations on MongoDB (or in memory), for LuaJIT.
--
-- A thin FFI binding over libresv (csrc/resv.h). Each call checks its Lua
-- arguments, fills one module-level resv_request_t (strings go in as
-- pointer and length into the caller's Lua strings, alive for the call)
-- and then waits for the answer in the way the caller's context allows:
--
--   * in a coroutine started by resv.spawn: submit the job to the module's
--     inbox and yield; resv.poll()/resv.run() resume it (resv.sched);
--   * in OpenResty, in a phase that may yield: submit the job and wait
--     through nginx's timers, never blocking the worker (resv.ngx);
--   * anywhere else: resv_call, which blocks until the answer or the
--     call's deadline.
--
-- A job that finishes as it is submitted (every call of the memory store,
-- bad input) is answered at once in every context, without a yield.
--
-- Answers become plain tables (SPEC section 9); errors are `nil, "<code>:
-- <message>"` (SPEC section 8). Calling a method on the wrong object is a
-- programmer's mistake and raises.
local ffi = require "ffi"
local C = require "resv.ffi"
local sched = require "resv.sched"
local ngxwait = require "resv.ngx"

local error = error
local type = type
local pairs = pairs
local tostring = tostring
local tonumber = tonumber
local setmetatable = setmetatable
local getmetatable = getmetatable
local math_huge = math.huge
local math_floor = math.floor
local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_string = ffi.string
local str_find = string.find

local resv_store_open = C.resv_store_open
local resv_store_shutdown = C.resv_store_shutdown
local resv_store_close = C.resv_store_close
local resv_store_set_time = C.resv_store_set_time
local resv_store_use_system_time = C.resv_store_use_system_time
local resv_store_now = C.resv_store_now
local resv_store_is_sharded = C.resv_store_is_sharded
local resv_store_runs_inline = C.resv_store_runs_inline
local resv_store_describe = C.resv_store_describe
local resv_store_type = C.resv_store_type
local resv_type_collection = C.resv_type_collection
local resv_call = C.resv_call
local resv_submit = C.resv_submit
local resv_job_done = C.resv_job_done
local resv_job_error = C.resv_job_error
local resv_job_answer = C.resv_job_answer
local resv_job_destroy = C.resv_job_destroy
local resv_answer_clear = C.resv_answer_clear

local error_string = sched.error_string
local in_spawned = sched.in_spawned
local get_inbox = sched.inbox
local sched_wait = sched.wait
local ngx_usable = ngxwait.usable
local ngx_wait = ngxwait.wait

-- Buffers reused by every call: the module never yields between filling
-- one and reading it back.
local req = ffi_new("resv_request_t")
local err_buf = ffi_new("resv_error_t")
local answer_buf = ffi_gc(ffi_new("resv_answer_t"), resv_answer_clear)
local describe_buf = ffi_new("char[?]", 256)

local OP_RESERVE = C.RESV_OP_RESERVE
local OP_CONFIRM = C.RESV_OP_CONFIRM
local OP_ABANDON = C.RESV_OP_ABANDON
local OP_RELEASE = C.RESV_OP_RELEASE
local OP_GET = C.RESV_OP_GET

local STATE_NONE = C.RESV_STATE_NONE
local STATE_PENDING = C.RESV_STATE_PENDING

-- Largest integer a Lua number holds exactly.
local MAX_INTEGER = 2 ^ 53
local MAX_INT32 = 2 ^ 31 - 1

local status_names, state_names = {}, {}
for i = 0, 9 do
  status_names[i] = ffi_string(C.resv_status_name(i))
end
for i = 0, 2 do
  state_names[i] = ffi_string(C.resv_state_name(i))
end

local _M = {
  _VERSION = ffi_string(C.resv_version()),
  spawn = sched.spawn,
  poll = sched.poll,
  run = sched.run,
  fd = sched.fd,
}

local Store = {}
Store.__index = Store

local Type = {}
Type.__index = Type

---------------------------------------------------------------------------
-- Answers

local function lua_string(s)
  return ffi_string(s.ptr, s.len)
end

local function owner_table(a)
  return { tenant = lua_string(a.owner_tenant), id = lua_string(a.owner_id) }
end

local function holds_array(a)
  local holds = {}
  local h = a.holds
  for i = 0, tonumber(a.nholds) - 1 do
    holds[i + 1] = lua_string(h[i])
  end
  return holds
end

-- Converts a resv_answer_t to the table of SPEC section 9. A reserve or
-- confirm passes its own owner (ot, oid) and attempt: a `reserved` or
-- `confirmed` answer is always that owner's, and a reservation held by one
-- attempt is held by this one, so those strings are reused instead of
-- copied out of C again.
local function answer_table(a, ot, oid, attempt)
  local status = status_names[a.status] or tostring(a.status)
  local state = a.state
  local t = { status = status }
  if state == STATE_NONE then
    return t
  end
  local mine = ot ~= nil and status ~= "conflict"
  t.owner = mine and { tenant = ot, id = oid } or owner_table(a)
  if state == STATE_PENDING then
    t.expires_at = tonumber(a.expires_at)
    if status == "conflict" then
      t.state = state_names[state]
    elseif mine and attempt ~= nil and a.nholds == 1 then
      t.holds = { attempt }
    else
      t.holds = holds_array(a)
    end
  else
    t.version = tonumber(a.version)
    if status == "conflict" then
      t.state = state_names[state]
    end
  end
  return t
end

-- Reads a finished job, frees it and returns the answer or nil, err.
local function finish_job(job, ot, oid, attempt)
  local err = resv_job_error(job)
  local res, msg
  if err ~= nil and err.code ~= 0 then
    msg = error_string(err)
  else
    local a = resv_job_answer(job)
    if a == nil then
      msg = "server: the job finished without an answer"
    else
      res = answer_table(a, ot, oid, attempt)
    end
  end
  ffi_gc(job, nil)
  resv_job_destroy(job)
  return res, msg
end

-- Runs the call in req on type handle h, waiting as the context allows.
-- A store that answers inline (the memory store) never needs a job: its
-- resv_call returns at once on this thread.
local function call(h, inline, ot, oid, attempt)
  local spawned = not inline and in_spawned()
  if spawned or (not inline and ngx_usable()) then
    local inbox
    if spawned then
      local ierr
      inbox, ierr = get_inbox()
      if inbox == nil then
        return nil, ierr
      end
    end
    local job = resv_submit(h, req, inbox, err_buf)
    if job == nil then
      return nil, error_string(err_buf)
    end
    if not resv_job_done(job) then
      -- Should the waiting coroutine be dropped (an aborted request), the
      -- collector frees the job; resv_job_destroy copes with running jobs.
      job = ffi_gc(job, resv_job_destroy)
      if spawned then
        sched_wait(job)
      else
        ngx_wait(job)
      end
    end
    return finish_job(job, ot, oid, attempt)
  end

  if not resv_call(h, req, answer_buf, err_buf) then
    return nil, error_string(err_buf)
  end
  return answer_table(answer_buf, ot, oid, attempt)
end

---------------------------------------------------------------------------
-- Arguments

local function invalid(what, msg)
  return "invalid: " .. what .. ": " .. msg
end

local function expected(what, want, got)
  return invalid(what, "expected " .. want .. ", got " .. type(got))
end

-- Puts Lua string s into the resv_str_t field dst.
local function set_str(dst, s)
  dst.ptr = s
  dst.len = #s
end

local function check_string(what, s, default)
  if s == nil and default ~= nil then
    return default
  end
  if type(s) ~= "string" then
    return nil, expected(what, "a string", s)
  end
  return s
end

-- Fills req.key from a key table, or returns an error.
local function fill_key(key)
  if type(key) ~= "table" then
    return expected("key", "a table", key)
  end
  local tenant, err = check_string("key.tenant", key.tenant, "")
  if not tenant then return err end
  local ns
  ns, err = check_string("key.namespace", key.namespace)
  if not ns then return err end
  local k
  k, err = check_string("key.key", key.key)
  if not k then return err end
  local rk = req.key
  set_str(rk.tenant, tenant)
  set_str(rk.ns, ns)
  set_str(rk.key, k)
  return nil
end

local function fill_owner(owner)
  if type(owner) ~= "table" then
    return expected("owner", "a table", owner)
  end
  local tenant, err = check_string("owner.tenant", owner.tenant, "")
  if not tenant then return err end
  local id
  id, err = check_string("owner.id", owner.id)
  if not id then return err end
  local ro = req.owner
  set_str(ro.tenant, tenant)
  set_str(ro.id, id)
  return nil
end

local function fill_attempt(attempt)
  if type(attempt) ~= "string" then
    return expected("attempt", "a string", attempt)
  end
  set_str(req.attempt, attempt)
  return nil
end

-- An integer n with lo <= n <= hi, as a Lua number (never NaN or inf).
local function check_integer(what, n, lo, hi, words)
  if type(n) ~= "number" then
    return nil, expected(what, words, n)
  end
  if n ~= n or n == math_huge or n == -math_huge or n ~= math_floor(n)
     or n < lo or n > hi then
    return nil, invalid(what, "expected " .. words .. ", got " .. tostring(n))
  end
  return n
end

local function clear_request(op)
  req.op = op
  req.attempt.ptr = nil
  req.attempt.len = 0
  req.owner.tenant.ptr = nil
  req.owner.tenant.len = 0
  req.owner.id.ptr = nil
  req.owner.id.len = 0
  req.ttl_ms = 0
  req.version = 0
end

local function check_type(self, method)
  if getmetatable(self) ~= Type then
    error("resv: " .. method .. " must be called on a type object "
          .. "(store:type(...)), as t:" .. method .. "(...)", 3)
  end
  return self.handle
end

---------------------------------------------------------------------------
-- Types

function Type:reserve(key, owner, attempt, ttl_ms)
  local h = check_type(self, "reserve")
  clear_request(OP_RESERVE)
  local err = fill_key(key) or fill_owner(owner) or fill_attempt(attempt)
  if err then return nil, err end
  local ttl
  ttl, err = check_integer("ttl_ms", ttl_ms, 1, MAX_INTEGER,
                           "a positive integer (milliseconds)")
  if not ttl then return nil, err end
  req.ttl_ms = ttl
  return call(h, self.inline, owner.tenant or "", owner.id, attempt)
end

function Type:confirm(key, owner, version)
  local h = check_type(self, "confirm")
  clear_request(OP_CONFIRM)
  local err = fill_key(key) or fill_owner(owner)
  if err then return nil, err end
  local v
  v, err = check_integer("version", version, 0, MAX_INTEGER,
                         "a non-negative integer")
  if not v then return nil, err end
  req.version = v
  return call(h, self.inline, owner.tenant or "", owner.id)
end

function Type:abandon(key, owner, attempt)
  local h = check_type(self, "abandon")
  clear_request(OP_ABANDON)
  local err = fill_key(key) or fill_owner(owner) or fill_attempt(attempt)
  if err then return nil, err end
  return call(h, self.inline)
end

function Type:release(key, owner)
  local h = check_type(self, "release")
  clear_request(OP_RELEASE)
  local err = fill_key(key) or fill_owner(owner)
  if err then return nil, err end
  return call(h, self.inline)
end

function Type:get(key)
  local h = check_type(self, "get")
  clear_request(OP_GET)
  local err = fill_key(key)
  if err then return nil, err end
  return call(h, self.inline)
end

-- The MongoDB collection of the type ("wow_reservation__<c>__<a>").
function Type:collection()
  local h = check_type(self, "collection")
  return ffi_string(resv_type_collection(h))
end

function Type:__tostring()
  return "resv.type: " .. ffi_string(resv_type_collection(self.handle))
end

---------------------------------------------------------------------------
-- Stores

local function check_store(self, method)
  if getmetatable(self) ~= Store then
    error("resv: " .. method .. " must be called on a store "
          .. "(resv.open(...)), as store:" .. method .. "(...)", 3)
  end
  return self.handle
end

function Store:type(context, aggregate)
  local h = check_store(self, "type")
  if type(context) ~= "string" then
    return nil, expected("context", "a string", context)
  end
  if type(aggregate) ~= "string" then
    return nil, expected("aggregate", "a string", aggregate)
  end
  local id = context .. "\0" .. aggregate
  local t = self.types[id]
  if t then
    return t
  end
  local th = resv_store_type(h, context, #context, aggregate, #aggregate,
                             err_buf)
  if th == nil then
    return nil, error_string(err_buf)
  end
  -- The C handle belongs to the store; the reference to the store keeps
  -- it from being collected while the type is in use.
  t = setmetatable({ handle = th, store = self,
                     inline = resv_store_runs_inline(h) }, Type)
  self.types[id] = t
  return t
end

-- Freezes the store's clock at ms (epoch milliseconds); nil: system clock.
function Store:set_time(ms)
  local h = check_store(self, "set_time")
  if ms == nil then
    resv_store_use_system_time(h)
    return true
  end
  local n, err = check_integer("ms", ms, -MAX_INTEGER, MAX_INTEGER,
                               "an integer (epoch milliseconds)")
  if not n then return nil, err end
  resv_store_set_time(h, n)
  return true
end

-- The store's clock, epoch milliseconds.
function Store:now()
  local h = check_store(self, "now")
  return tonumber(resv_store_now(h))
end

function Store:is_sharded()
  local h = check_store(self, "is_sharded")
  return resv_store_is_sharded(h)
end

-- Stops the store: calls still queued answer "closed", later calls too.
-- The memory goes when the store and its types are collected, so a
-- coroutine still holding a type never touches freed memory.
function Store:close()
  local h = check_store(self, "close")
  resv_store_shutdown(h)
  self.closed = true
  return true
end

function Store:__tostring()
  resv_store_describe(self.handle, describe_buf, 256)
  return "resv.store: " .. ffi_string(describe_buf)
end

---------------------------------------------------------------------------
-- Opening

local OPTIONS = {
  uri = true, database = true, sharding = true, threads = true,
  queue = true, timeout_ms = true, max_string = true, write_concern = true,
  max_holds = true,
}

local SHARDING = { auto = C.RESV_SHARDING_AUTO, off = C.RESV_SHARDING_OFF }

local function check_c_string(what, s)
  if type(s) ~= "string" then
    return nil, expected(what, "a string", s)
  end
  if str_find(s, "\0", 1, true) then
    return nil, invalid(what, "contains a NUL byte")
  end
  return s
end

local function fill_options(o, opts)
  for name in pairs(opts) do
    if not OPTIONS[name] then
      return "invalid: unknown option " .. tostring(name)
    end
  end
  local err
  if opts.uri ~= nil then
    local uri
    uri, err = check_c_string("uri", opts.uri)
    if not uri then return err end
    o.uri = uri
  end
  if opts.database ~= nil then
    local db
    db, err = check_c_string("database", opts.database)
    if not db then return err end
    if db == "" then return invalid("database", "empty") end
    o.database = db
  end
  if opts.sharding ~= nil then
    local mode = SHARDING[opts.sharding]
    if mode == nil then
      return invalid("sharding", 'expected "auto" or "off", got '
                     .. tostring(opts.sharding))
    end
    o.sharding = mode
  end
  local wc = opts.write_concern
  if wc == "majority" then
    o.write_concern = C.RESV_WRITE_MAJORITY
  elseif wc ~= nil then
    -- C takes 0 for "the default", so 0 (w: 0) is refused here.
    local n
    n, err = check_integer("write_concern", wc, 1, MAX_INT32,
                           '"majority" or an integer from 1 to ' .. MAX_INT32)
    if not n then return err end
    o.write_concern = n
  end
  local limits = {
    { "threads", 1, 1024 },
    { "queue", 1, MAX_INT32 },
    { "timeout_ms", 1, MAX_INT32 },
    { "max_string", 1, MAX_INT32 },
    { "max_holds", 1, MAX_INT32 },
  }
  for i = 1, #limits do
    local name, lo, hi = limits[i][1], limits[i][2], limits[i][3]
    local v = opts[name]
    if v ~= nil then
      local n
      n, err = check_integer(name, v, lo, hi, "an integer from " .. lo
                             .. " to " .. hi)
      if not n then return err end
      o[name] = n
    end
  end
  return nil
end

-- Opens a store; see the README for the options. Returns the store or
-- nil, "<code>: <message>".
function _M.open(opts)
  if opts == nil then
    opts = {}
  elseif type(opts) ~= "table" then
    return nil, expected("options", "a table", opts)
  end
  local o = ffi_new("resv_options_t")
  -- The option strings must outlive resv_store_open: opts holds them.
  local err = fill_options(o, opts)
  if err then return nil, err end
  local h = resv_store_open(o, err_buf)
  if h == nil then
    return nil, error_string(err_buf)
  end
  return setmetatable({
    handle = ffi_gc(h, resv_store_close),
    types = {},
    closed = false,
  }, Store)
end

return _M

-- resv.type: an aggregate type's calls (reserve, confirm, abandon, release,
-- get, sweep; scan and put for tools) and their answers.
--
-- Each method reads every field of its key and owner exactly once, into
-- a request table, checks them, and hands them to C as arguments of the
-- FFI call: LuaJIT keeps a call's arguments alive for the call, and
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
local jit = require "jit"
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
local exact = base.exact
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
local STATUS_SWEPT = C.RESV_SWEPT

local STATE_NONE = C.RESV_STATE_NONE
local STATE_PENDING = C.RESV_STATE_PENDING

-- The name tables end where C's names do ("unknown" past the last).
local function names(name_of)
  local t, i = {}, 0
  while true do
    local s = ffi_string(name_of(i))
    if s == "unknown" then return t end
    t[i] = s
    i = i + 1
  end
end
local status_names = names(C.resv_status_name)
local state_names = names(C.resv_state_name)
local PENDING = state_names[C.RESV_STATE_PENDING]
local CONFIRMED = state_names[C.RESV_STATE_CONFIRMED]

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

---------------------------------------------------------------------------
-- Answers

local function lua_string(s)
  return ffi_string(s.ptr, s.len)
end

-- An answer's owner and holds, each in the table t when the caller gave
-- one ({ into = t }: reused, so a call that has them allocates nothing),
-- else in a new one. mine: the caller's own attempt, which is the one hold
-- of a reservation of theirs held by one (see answer_table).
local function owner_of(tenant, id, t)
  if type(t) ~= "table" then
    return { tenant = tenant, id = id }
  end
  t.tenant, t.id = tenant, id
  return t
end

local function owner_copy(a, t)
  return owner_of(lua_string(a.owner_tenant), lua_string(a.owner_id), t)
end

local function holds_of(a, mine, t)
  local n = tonumber(a.nholds)
  local one = mine and n == 1
  if type(t) ~= "table" then
    if one then
      return { mine }
    end
    t = {}
  end
  if one then
    t[1] = mine
  else
    local h = a.holds
    for i = 1, n do
      t[i] = lua_string(h[i - 1])
    end
  end
  for i = #t, n + 1, -1 do
    t[i] = nil
  end
  return t
end

-- An answer into the caller's table t: every field of an answer is set,
-- those of other shapes to nil.
local function fill(t, status, owner, state, expires_at, holds, version, count)
  t.status, t.owner, t.state, t.expires_at = status, owner, state, expires_at
  t.holds, t.version, t.count = holds, version, count
  return t
end

-- Converts a resv_answer_t to the table of docs/design.md section 9, or into the
-- caller's table `into`. A reserve or confirm passes its own owner (ot,
-- oid) and attempt: a `reserved` or `confirmed` answer is always that
-- owner's, and a reservation held by one attempt is held by this one, so
-- those strings are reused instead of copied out of C again. Each fresh
-- shape is made by one constructor, which sizes the table once (LuaJIT),
-- instead of growing it field by field.
local function answer_table(a, ot, oid, attempt, into)
  local status = status_names[a.status] or tostring(a.status)
  local state = a.state
  if state == STATE_NONE then
    local count = a.status == STATUS_SWEPT and exact(a.count) or nil
    if into then
      return fill(into, status, nil, nil, nil, nil, nil, count)
    end
    if count then
      return { status = status, count = count }
    end
    return { status = status }
  end
  local conflict = status == "conflict"
  local mine = ot ~= nil and not conflict
  local reused = into and into.owner
  local owner = mine and owner_of(ot, oid, reused) or owner_copy(a, reused)
  if state == STATE_PENDING then
    local expires_at = exact(a.expires_at)
    if conflict then
      if into then
        return fill(into, status, owner, PENDING, expires_at)
      end
      return { status = status, owner = owner, state = PENDING, expires_at = expires_at }
    end
    local holds = holds_of(a, mine and attempt, into and into.holds)
    if into then
      return fill(into, status, owner, nil, expires_at, holds)
    end
    return { status = status, owner = owner, expires_at = expires_at, holds = holds }
  end
  local version = exact(a.version)
  if conflict then
    if into then
      return fill(into, status, owner, CONFIRMED, nil, nil, version)
    end
    return { status = status, owner = owner, state = CONFIRMED, version = version }
  end
  if into then
    return fill(into, status, owner, nil, nil, nil, version)
  end
  return { status = status, owner = owner, version = version }
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

-- A request is a table of the call's checked arguments, each read once
-- from the caller's tables:
--   op, ttl, version   the operation and its numbers;
--   kt, kn, kk         the key's tenant, namespace and key;
--   ot, oid, attempt   the owner's tenant and id, and the attempt;
--   mine               a reserve or confirm, whose answer names that owner.
-- A shape says how a request reaches C and how its answer comes back: call
-- (blocks), try (answers on this thread or says it would wait), submit (a
-- job into an inbox), answer (a resv_answer_t to a table). Each passes the
-- request's strings as arguments of the FFI call, which LuaJIT keeps alive
-- for the call: C reads them only during it (resv_call_args,
-- resv_try_call_args) or copies them before it returns (resv_submit_args).
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

-- Reads a finished job, frees it and returns the answer or nil, err.
local function finish_job(job, shape, r, into)
  local res, msg
  local a = resv_job_answer(job)
  if a ~= nil then
    res = shape.answer(a, r, into)
  else
    local err = resv_job_error(job)
    if err ~= nil and err.code ~= 0 then
      msg = error_string(err)
    else
      msg = "server: the job finished without an answer"
    end
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
-- allows.
local function call(t, shape, r, opts)
  local timeout, into = call_opts(opts)
  if not timeout then return nil, into end -- (then into is the error)
  if t.tries then
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
  return call(self, ONE, { op = OP_RESERVE, ttl = ttl, version = 0, kt = kt, kn = kn,
                          kk = kk, ot = ot, oid = oid, attempt = attempt,
                          mine = true }, opts)
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
  return call(self, ONE, { op = OP_CONFIRM, ttl = 0, version = v, kt = kt, kn = kn,
                          kk = kk, ot = ot, oid = oid, attempt = "",
                          mine = true }, opts)
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
  return call(self, ONE, { op = OP_ABANDON, ttl = 0, version = 0, kt = kt, kn = kn,
                          kk = kk, ot = ot, oid = oid, attempt = attempt,
                          mine = false }, opts)
end

function Type:release(key, owner, opts)
  check_type(self, "release")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  return call(self, ONE, { op = OP_RELEASE, ttl = 0, version = 0, kt = kt, kn = kn,
                          kk = kk, ot = ot, oid = oid, attempt = "",
                          mine = false }, opts)
end

function Type:get(key, opts)
  check_type(self, "get")
  local kt, kn, kk = key_fields(key)
  if not kt then return nil, kn end
  return call(self, ONE, { op = OP_GET, ttl = 0, version = 0, kt = kt, kn = kn,
                          kk = kk, ot = "", oid = "", attempt = "",
                          mine = false }, opts)
end

local SWEEP = { op = OP_SWEEP, ttl = 0, version = 0, kt = "", kn = "", kk = "",
                ot = "", oid = "", attempt = "", mine = false }

-- Deletes the type's pending reservations expired for sweep_grace_ms or
-- more: { status = "swept", count = n }, or nil, err.
function Type:sweep(opts)
  check_type(self, "sweep")
  return call(self, ONE, SWEEP, opts)
end

-- One page of the type's documents (resv_type_scan; for tools, it blocks
-- for one round trip): opts.after, the cursor of the previous page (absent:
-- from the start), opts.limit (1 to 10000, default 100). Returns
-- { entries = { ... }, next = cursor or nil, format = 1 | 0 | -1,
-- format_problem = text or nil }; each entry is get's answer with its key
-- ({ key = { tenant, namespace, key }, status, owner, ... }), or, for a
-- document that is not a format-1 reservation, { status = "format",
-- id = <its _id as JSON>, problem = <why>, key = <when its _id is one> }.
local scan_buf = ffi_gc(ffi_new("resv_scan_t"), C.resv_scan_clear)
local STATUS_NONE = C.RESV_NONE
function Type:scan(opts)
  check_type(self, "scan")
  opts = opts or {}
  if type(opts) ~= "table" then
    return nil, expected("options", "a table", opts)
  end
  local after, limit = opts.after or "", opts.limit or 100
  if type(after) ~= "string" then
    return nil, expected("after", "a string (a cursor)", after)
  end
  local err
  limit, err = check_integer("limit", limit, 1, 10000, "an integer from 1 to 10000")
  if not limit then return nil, err end
  if not C.resv_type_scan(self.handle, #after, after, limit, scan_buf, err_buf) then
    return nil, error_string(err_buf)
  end
  local s = scan_buf
  local entries = {}
  for i = 0, tonumber(s.count) - 1 do
    local e = s.entries[i]
    local r
    local key
    if e.key.len > 0 then
      key = { tenant = lua_string(e.tenant), namespace = lua_string(e.ns),
              key = lua_string(e.key) }
    end
    if e.status == STATUS_NONE then
      r = { status = "format", key = key, id = lua_string(e.id),
            problem = lua_string(e.problem) }
    else
      r = { status = status_names[e.status], key = key,
            owner = owner_copy(e) }
      if e.state == STATE_PENDING then
        r.expires_at = exact(e.expires_at)
        r.holds = holds_of(e)
      else
        r.version = exact(e.version)
      end
    end
    entries[i + 1] = r
  end
  local page = {
    entries = entries,
    next = s.next.len > 0 and lua_string(s.next) or nil,
    format = tonumber(s.format),
    format_problem = s.format_problem.len > 0 and lua_string(s.format_problem) or nil,
  }
  C.resv_scan_clear(s)
  return page
end

-- Writes the reservation r (a scan's entry of another store: { key =
-- { tenant, namespace, key }, status = "pending" | "expired" |
-- "confirmed", owner = { tenant, id }, expires_at, holds | version }) into
-- the type when its key is free (resv_type_put; a tool's call, it blocks).
-- Returns "added", "same" (that reservation was there) or "different"
-- (something else holds the key: nothing written), or nil, err.
local put_entry = ffi_new("resv_scan_entry_t")
local put_outcome = ffi_new("int32_t[1]")
local STATUS_OF = { pending = C.RESV_PENDING, expired = C.RESV_EXPIRED,
                    confirmed = C.RESV_CONFIRMED }
local OUTCOMES = { [C.RESV_PUT_ADDED] = "added", [C.RESV_PUT_SAME] = "same",
                   [C.RESV_PUT_DIFFERENT] = "different" }
local function set_str(field, s, keep)
  keep[#keep + 1] = s
  field.ptr = s
  field.len = #s
end
function Type:put(r)
  check_type(self, "put")
  if type(r) ~= "table" then return nil, expected("reservation", "a table", r) end
  local status = STATUS_OF[r.status]
  if not status then
    return nil, "invalid: reservation.status: expected pending, expired or confirmed, got "
      .. tostring(r.status)
  end
  local kt, kn, kk = key_fields(r.key)
  if not kt then return nil, kn end
  local ot, oid = owner_fields(r.owner)
  if not ot then return nil, oid end
  local e, keep = put_entry, {}
  e.status = status
  set_str(e.tenant, kt, keep)
  set_str(e.ns, kn, keep)
  set_str(e.key, kk, keep)
  set_str(e.owner_tenant, ot, keep)
  set_str(e.owner_id, oid, keep)
  e.holds, e.nholds, e.expires_at, e.version = nil, 0, 0, 0
  local err
  if status == C.RESV_CONFIRMED then
    e.state = C.RESV_STATE_CONFIRMED
    local v
    v, err = check_integer("reservation.version", r.version, 0, MAX_INTEGER,
                           "a non-negative integer", true)
    if not v then return nil, err end
    e.version = v
  else
    e.state = STATE_PENDING
    local at
    at, err = check_integer("reservation.expires_at", r.expires_at, -MAX_INTEGER,
                            MAX_INTEGER, "an integer (epoch ms)", true)
    if not at then return nil, err end
    e.expires_at = at
    local holds = r.holds
    if type(holds) ~= "table" then return nil, expected("reservation.holds", "a table", holds) end
    local n = #holds
    local arr = ffi_new("resv_str_t[?]", n > 0 and n or 1)
    keep[#keep + 1] = arr
    for i = 1, n do
      local h = holds[i]
      if type(h) ~= "string" then return nil, expected("reservation.holds[" .. i .. "]", "a string", h) end
      set_str(arr[i - 1], h, keep)
    end
    e.holds, e.nholds = arr, n
  end
  local ok = C.resv_type_put(self.handle, e, put_outcome, err_buf)
  -- e points into the strings of keep: alive until here (this function
  -- is never compiled, so the local keeps them).
  keep = nil
  e.holds, e.nholds = nil, 0
  if not ok then return nil, error_string(err_buf) end
  return OUTCOMES[put_outcome[0]] or tostring(put_outcome[0])
end
jit.off(Type.put)

-- The MongoDB collection of the type ("wow_reservation__<c>__<a>").
function Type:collection()
  check_type(self, "collection")
  return ffi_string(resv_type_collection(self.handle))
end

function Type:__tostring()
  return "resv.type: " .. ffi_string(resv_type_collection(self.handle))
end

-- The calls of several keys at once (resv/all.lua).
require("resv.all").install(Type, {
  key_fields = key_fields, owner_fields = owner_fields, check_type = check_type,
  answer_table = answer_table, status_names = status_names, run = call,
})

_M.Type = Type

return _M

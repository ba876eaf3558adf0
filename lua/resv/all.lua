-- resv.all: a type's calls of several keys at once (reserve_all,
-- confirm_all, abandon_all; design.md section 5, "Several keys at once"),
-- installed into resv.type's Type by install().
--
--   local r, err = t:reserve_all(keys, owner, attempt, ttl_ms [, opts])
--   local r, err = t:confirm_all(keys, owner, version [, opts])
--   local r, err = t:abandon_all(keys, owner, attempt [, opts])
--
-- keys is an array of key tables, each as a single-key call takes it
-- ({ tenant, namespace, key }). The answer is { status = ..., keys = {...} }
-- with keys[i] key i's own answer in the single-key shape.
--
-- C takes these calls as a resv_request_t whose keys field points at an
-- array of resv_key_t, which point into Lua strings: pointers in struct
-- fields, which the collector does not see. So each call reads every field
-- of its keys and owner once (a computed __index included), keeps the
-- strings where the collector sees them while C may read them, then fills
-- the module's request and key array and makes the C call:
--   * one or two keys on a store that answers on this thread (the memory
--     store; a file store with sync = "process" unless the write would
--     wait for another writer): the strings in locals, put in the
--     module's slots pinned[1..9] just before the C call and taken out
--     just after; no table is made for the request;
--   * otherwise: in a table of its own (the request, its strings in its
--     array part), which is put in pinned[1] for the C call, or which a
--     waiting call keeps on its own stack while parked.
-- resv_call and resv_try_call read the strings only during the call,
-- resv_submit copies them before it returns. The slots keep the strings
-- alive whatever the JIT compiler does with the locals, and a C call never
-- yields, so one set of slots serves every coroutine.
local ffi = require "ffi"
local C = require "resv.ffi"
local base = require "resv.base"

local type = type
local tostring = tostring
local tonumber = tonumber
local ffi_new = ffi.new
local gsub = string.gsub
local table_new = require "table.new"

local error_string = base.error_string
local expected = base.expected
local check_integer = base.check_integer
local err_buf = base.err_buf
local MAX_INTEGER = base.MAX_INTEGER

local OP_RESERVE_ALL = C.RESV_OP_RESERVE_ALL
local OP_CONFIRM_ALL = C.RESV_OP_CONFIRM_ALL
local OP_ABANDON_ALL = C.RESV_OP_ABANDON_ALL

-- The most keys a store takes (max_keys is 1 to 1024): more are refused
-- here, before anything is read or allocated for them.
local MOST_KEYS = 1024

local pinned = {}
local request = ffi_new("resv_request_t")
local key_array = ffi_new("resv_key_t[?]", MOST_KEYS)

local _M = {}

-- Set by install(): resv.type's pieces these calls share.
local key_fields, owner_fields, check_type, answer_table, status_names
local call_opts, answer_buf, run, run_checked

-- The key array's entry i (from 0) from the request r's strings 3i+1 to 3i+3.
local function set_key(i, tenant, ns, key)
  local k = key_array[i]
  k.tenant.ptr, k.tenant.len = tenant, #tenant
  k.ns.ptr, k.ns.len = ns, #ns
  k.key.ptr, k.key.len = key, #key
end

local function fill_key(r, i)
  local j = 3 * i
  set_key(i, r[j + 1], r[j + 2], r[j + 3])
end

-- The request's owner, attempt and key count.
local function set_rest(q, ot, oid, attempt, n)
  q.owner.tenant.ptr, q.owner.tenant.len = ot, #ot
  q.owner.id.ptr, q.owner.id.len = oid, #oid
  q.attempt.ptr, q.attempt.len = attempt, #attempt
  q.keys, q.nkeys = key_array, n
end

-- r: { kt1, kn1, kk1, kt2, ..., op = , ttl = , version = , n = , ot = ,
-- oid = , attempt = , mine = }. Fills the C request from r; the caller
-- has put r in pinned[1]. The first two keys are filled outside the loop
-- (as they are read in request_of and answered in ALL.answer): a loop of
-- one or two turns a call stops LuaJIT's traces, and the call would run
-- interpreted.
local function fill(r, timeout)
  local n = r.n
  local q = request
  q.op, q.ttl_ms, q.version, q.timeout_ms = r.op, r.ttl, r.version, timeout
  if n >= 1 then fill_key(r, 0) end
  if n >= 2 then fill_key(r, 1) end
  for i = 2, n - 1 do fill_key(r, i) end
  set_rest(q, r.ot, r.oid, r.attempt, n)
  return q
end

-- The shape of these calls for a runner (resv.type's call): how the
-- request reaches C (call, try, submit) and how its answer comes back.
local ALL = {}

function ALL.call(h, r, timeout, answer)
  pinned[1] = r
  local ok = C.resv_call(h, fill(r, timeout), answer, err_buf)
  pinned[1] = nil
  return ok
end

function ALL.try(h, r, timeout, answer)
  pinned[1] = r
  local ok = C.resv_try_call(h, fill(r, timeout), answer, err_buf)
  pinned[1] = nil
  return ok
end

function ALL.submit(h, r, timeout, inbox)
  pinned[1] = r
  local job = C.resv_submit(h, fill(r, timeout), inbox, err_buf)
  pinned[1] = nil
  return job
end

-- Key i's answer (a from C) into list[i], into the table there when reuse.
local function answer_key(list, i, a, ot, oid, attempt, reuse)
  local mine = reuse and type(list[i]) == "table" and list[i] or nil
  list[i] = answer_table(a, ot, oid, attempt, mine)
end

-- { status, keys = { key i's answer, ... } }, or into the caller's table
-- (its keys table and each key's table reused). ot: the owner's tenant
-- when the keys' answers may reuse the owner (reserve_all, confirm_all).
local function answer_all(a, ot, oid, attempt, into)
  local status = status_names[a.status] or tostring(a.status)
  local n = tonumber(a.nkeys)
  local reuse = into and type(into.keys) == "table"
  local list = reuse and into.keys or table_new(n, 0)
  local keys = a.keys
  if n >= 1 then answer_key(list, 1, keys[0], ot, oid, attempt, reuse) end
  if n >= 2 then answer_key(list, 2, keys[1], ot, oid, attempt, reuse) end
  for i = 3, n do answer_key(list, i, keys[i - 1], ot, oid, attempt, reuse) end
  if reuse then
    for i = #list, n + 1, -1 do list[i] = nil end
  end
  if into then
    into.status, into.keys = status, list
    return into
  end
  return { status = status, keys = list }
end

function ALL.answer(a, r, into)
  return answer_all(a, r.mine and r.ot or nil, r.oid, r.attempt, into)
end
_M.ALL = ALL

-- "keys[i]: ..." for an error of key i's fields.
local function key_error(i, err)
  return "invalid: keys[" .. i .. "]: " .. gsub(err, "^invalid: ", "")
end

-- Key i's fields into r[3i-2 .. 3i]; nil, or the error.
local function hold_key(r, i, key)
  local kt, kn, kk = key_fields(key)
  if not kt then return key_error(i, kn) end
  r[3 * i - 2], r[3 * i - 1], r[3 * i] = kt, kn, kk
end

-- The request of keys and owner: each field read once, the keys' strings
-- in the request's array part (one table a call). n: #keys, checked.
local function request_of(op, keys, n, owner, attempt, ttl, version, mine)
  local r, err = table_new(3 * n, 8), nil
  if n >= 1 then err = hold_key(r, 1, keys[1]) end
  if not err and n >= 2 then err = hold_key(r, 2, keys[2]) end
  for i = 3, n do
    if err then break end
    err = hold_key(r, i, keys[i])
  end
  if err then return nil, err end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  r.op, r.ttl, r.version, r.n = op, ttl, version, n
  r.ot, r.oid, r.attempt, r.mine = ot, oid, attempt, mine
  return r
end

-- One or two keys on a store that answers inline, or that may answer on
-- this thread (resv_try_call: a file store with sync = "process"): the
-- fields into locals, pinned for the C call (see the top of this file),
-- the same checks in the same order as request_of and resv.type's call.
-- When the try would wait for another writer, the locals become the
-- request of a call that waits as the context allows.
local function few(t, opts, op, keys, n, owner, attempt, ttl, version, mine)
  local at, an, ak = key_fields(keys[1])
  if not at then return nil, key_error(1, an) end
  local bt, bn, bk = "", "", ""
  if n == 2 then
    bt, bn, bk = key_fields(keys[2])
    if not bt then return nil, key_error(2, bn) end
  end
  local ot, oid = owner_fields(owner)
  if not ot then return nil, oid end
  local timeout, into = call_opts(opts)
  if not timeout then return nil, into end -- (then into is the error)
  local p, q = pinned, request
  p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9] =
    at, an, ak, bt, bn, bk, ot, oid, attempt
  q.op, q.ttl_ms, q.version, q.timeout_ms = op, ttl, version, timeout
  set_key(0, at, an, ak)
  set_key(1, bt, bn, bk)
  set_rest(q, ot, oid, attempt, n)
  local ok
  if t.inline then
    ok = C.resv_call(t.handle, q, answer_buf, err_buf)
  else
    ok = C.resv_try_call(t.handle, q, answer_buf, err_buf)
  end
  p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9] =
    nil, nil, nil, nil, nil, nil, nil, nil, nil
  if ok then
    return answer_all(answer_buf, mine and ot or nil, oid, attempt, into)
  end
  if t.inline or err_buf.code ~= 0 then return nil, error_string(err_buf) end
  local r = { at, an, ak, bt, bn, bk, op = op, ttl = ttl, version = version, n = n,
              ot = ot, oid = oid, attempt = attempt, mine = mine }
  return run_checked(t, ALL, r, timeout, into, true)
end

-- Checks keys and runs the call: few, or a request and run.
local function all(t, opts, op, keys, owner, attempt, ttl, version, mine)
  if type(keys) ~= "table" then
    return nil, expected("keys", "an array of key tables", keys)
  end
  local n = #keys
  if n > MOST_KEYS then
    return nil, "invalid: keys: " .. n .. " keys, more than max_keys"
  end
  if (t.inline or t.tries) and n >= 1 and n <= 2 then
    return few(t, opts, op, keys, n, owner, attempt, ttl, version, mine)
  end
  local r, err = request_of(op, keys, n, owner, attempt, ttl, version, mine)
  if not r then return nil, err end
  return run(t, ALL, r, opts)
end

-- Installs the methods into Type. pieces: resv.type's key_fields,
-- owner_fields, check_type, answer_table, status_names, call_opts and
-- answer_buf (an inline call's answer), and its run(t, shape, r, opts)
-- (resv.type's call), which runs a request of a shape and waits as the
-- context allows, and run_checked(t, shape, r, timeout, into, tried), the
-- same with the options checked (tried: the try was made).
function _M.install(Type, pieces)
  key_fields, owner_fields = pieces.key_fields, pieces.owner_fields
  check_type, answer_table = pieces.check_type, pieces.answer_table
  status_names, call_opts = pieces.status_names, pieces.call_opts
  answer_buf, run, run_checked = pieces.answer_buf, pieces.run, pieces.run_checked

  function Type:reserve_all(keys, owner, attempt, ttl_ms, opts)
    check_type(self, "reserve_all")
    if type(attempt) ~= "string" then
      return nil, expected("attempt", "a string", attempt)
    end
    local ttl, err = check_integer("ttl_ms", ttl_ms, 1, MAX_INTEGER,
                                   "a positive integer (milliseconds)")
    if not ttl then return nil, err end
    return all(self, opts, OP_RESERVE_ALL, keys, owner, attempt, ttl, 0, true)
  end

  function Type:confirm_all(keys, owner, version, opts)
    check_type(self, "confirm_all")
    local v, err = check_integer("version", version, 0, MAX_INTEGER,
                                 "a non-negative integer", true)
    if not v then return nil, err end
    return all(self, opts, OP_CONFIRM_ALL, keys, owner, "", 0, v, true)
  end

  function Type:abandon_all(keys, owner, attempt, opts)
    check_type(self, "abandon_all")
    if type(attempt) ~= "string" then
      return nil, expected("attempt", "a string", attempt)
    end
    return all(self, opts, OP_ABANDON_ALL, keys, owner, attempt, 0, 0, false)
  end
end

return _M

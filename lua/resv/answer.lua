-- resv.answer: a call's answer (a resv_answer_t, or a scan's entry) as the
-- tables of docs/design.md section 9, fresh or into the caller's own.
local ffi = require "ffi"
local C = require "resv.ffi"
local base = require "resv.base"

local type = type
local tostring = tostring
local tonumber = tonumber
local ffi_string = ffi.string

local exact = base.exact

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

local _M = { status_names = status_names, state_names = state_names }

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

_M.lua_string = lua_string
_M.owner_copy = owner_copy
_M.holds_of = holds_of
_M.table = answer_table

return _M

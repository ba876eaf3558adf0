-- resv.tools: a type's calls for tools (the `resv` command's check
-- and copy): scan, one page of the type's reservations at a time, and
-- put, a reservation of another store written where its key is free. Both
-- block for their round trip; neither is for a request's path. Installed
-- into resv.type's Type by install().
local ffi = require "ffi"
local jit = require "jit"
local C = require "resv.ffi"
local base = require "resv.base"
local answer = require "resv.answer"

local type = type
local tonumber = tonumber
local tostring = tostring
local ffi_gc = ffi.gc
local ffi_new = ffi.new

local error_string = base.error_string
local exact = base.exact
local expected = base.expected
local check_integer = base.check_integer
local err_buf = base.err_buf
local MAX_INTEGER = base.MAX_INTEGER
local status_names = answer.status_names
local lua_string = answer.lua_string
local owner_copy = answer.owner_copy
local holds_of = answer.holds_of
local STATE_PENDING = C.RESV_STATE_PENDING

local _M = {}

-- Installs scan and put into Type. pieces: resv.type's check_type,
-- key_fields and owner_fields.
function _M.install(Type, pieces)
  local check_type = pieces.check_type
  local key_fields, owner_fields = pieces.key_fields, pieces.owner_fields

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
end

return _M

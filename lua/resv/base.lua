-- resv.base: what the Lua modules of resv share.
--
-- One place for the error buffer every call fills, the "<code>: <message>"
-- strings of docs/design.md section 8, argument checks, job addresses, and the
-- conversion of C's int64 values to Lua: a number when it is exact (up to
-- 2^53), otherwise the int64_t cdata itself, so nothing is ever rounded
-- (docs/design.md section 9).
local ffi = require "ffi"
local C = require "resv.ffi"

local type = type
local tostring = tostring
local tonumber = tonumber
local math_huge = math.huge
local math_floor = math.floor
local ffi_cast = ffi.cast
local ffi_istype = ffi.istype
local ffi_new = ffi.new
local ffi_string = ffi.string
local resv_code_name = C.resv_code_name

local int64_t = ffi.typeof("int64_t")
local uint64_t = ffi.typeof("uint64_t")
local uintptr_t = ffi.typeof("uintptr_t")

local _M = {
  -- Largest integer a Lua number holds exactly.
  MAX_INTEGER = 2 ^ 53,
  -- The longest deadline, a store's or a call's (C: RESV__MAX_TIMEOUT_MS).
  MAX_TIMEOUT_MS = 24 * 3600 * 1000,
  -- Filled by the C call that failed, read back at once: no caller yields
  -- between the two.
  err_buf = ffi_new("resv_error_t"),
}

local EXACT_MAX = 9007199254740992LL
local EXACT_MIN = -9007199254740992LL
local INT64_MAX = 0x7fffffffffffffffLL

-- "<code>: <message>" for a filled resv_error_t.
function _M.error_string(err)
  local code = ffi_string(resv_code_name(err.code))
  local message = ffi_string(err.message)
  if message == "" then
    return code
  end
  return code .. ": " .. message
end

function _M.job_address(job)
  return tonumber(ffi_cast(uintptr_t, job))
end

-- An int64_t read from a C struct (LuaJIT boxes it in a new cdata), as a
-- Lua number when that is exact, else as that cdata.
function _M.exact(v)
  if v <= EXACT_MAX and v >= EXACT_MIN then
    return tonumber(v)
  end
  return v
end

function _M.invalid(what, msg)
  return "invalid: " .. what .. ": " .. msg
end

function _M.expected(what, want, got)
  return _M.invalid(what, "expected " .. want .. ", got " .. type(got))
end

-- An integer n with lo <= n <= hi as a Lua number (never NaN or inf), or,
-- with `wide`, also an int64_t or uint64_t cdata from lo to INT64_MAX: the
-- values past 2^53 that a Lua number cannot hold. Returns n, or nil and
-- an error.
function _M.check_integer(what, n, lo, hi, words, wide)
  if wide and type(n) == "cdata" and (ffi_istype(int64_t, n) or ffi_istype(uint64_t, n)) then
    if n < lo or (ffi_istype(uint64_t, n) and n > INT64_MAX) then
      return nil, _M.invalid(what, "expected " .. words .. ", got " .. tostring(n))
    end
    return n
  end
  if type(n) ~= "number" then
    return nil, _M.expected(what, words, n)
  end
  if n ~= n or n == math_huge or n == -math_huge or n ~= math_floor(n)
     or n < lo or n > hi then
    return nil, _M.invalid(what, "expected " .. words .. ", got " .. tostring(n))
  end
  return n
end

return _M

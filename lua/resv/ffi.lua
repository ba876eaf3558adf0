-- resv.ffi: declares libresv's C API to the FFI and loads the library.
--
-- The declarations come from resv.cdef, a copy of the part of csrc/resv.h
-- written for ffi.cdef. They are declared once per Lua state: a second
-- load of this module (busted's insulation, package.loaded being cleared)
-- finds the types already there and skips ffi.cdef, which would otherwise
-- fail on the redefinition.
--
-- The library is looked up on package.cpath as "libresv" (LuaRocks installs
-- it next to the other C modules, tests run with LUA_CPATH="build/?.so;;"),
-- then by the system's loader as "resv" (an install under /usr/local/lib).
local ffi = require "ffi"

local pcall = pcall
local package = package

if not pcall(ffi.typeof, "resv_request_t") then
  ffi.cdef(require "resv.cdef")
end

local function load_library()
  local path = package.searchpath("libresv", package.cpath)
  if path then
    local ok, lib = pcall(ffi.load, path)
    if ok then
      return lib
    end
    error("resv: cannot load " .. path .. ": " .. tostring(lib), 3)
  end
  local ok, lib = pcall(ffi.load, "resv")
  if ok then
    return lib
  end
  error("resv: libresv not found on package.cpath (" .. package.cpath
        .. ") nor by the system loader: " .. tostring(lib), 3)
end

return load_library()

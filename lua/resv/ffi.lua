-- resv.ffi: declares libresv's C API to the FFI and loads the library.
--
-- The declarations come from resv.cdef, a copy of the part of csrc/resv.h
-- written for ffi.cdef. They are declared once per Lua state: a second
-- load of this module (busted's insulation, package.loaded being cleared)
-- finds the types already there and skips ffi.cdef, which would otherwise
-- fail on the redefinition.
--
-- The library is looked up on package.cpath as "libresv" (make install
-- links it into Lua's C module folder, tests run with
-- LUA_CPATH="build/?.so;;"), then where resv.libpath says (a file that
-- make lua-install, LuaRocks' install step, writes with the library's
-- path), then by the system's loader as libresv.so (make install's link
-- for development) or its soname libresv.so.0 (all a runtime package has).
local ffi = require "ffi"

local pcall = pcall
local io = io
local require = require
local tostring = tostring
local type = type
local package = package

if not pcall(ffi.typeof, "resv_request_t") then
  ffi.cdef(require "resv.cdef")
end

local function load_from(path)
  local ok, lib = pcall(ffi.load, path)
  if ok then
    return lib
  end
  error("resv: cannot load " .. path .. ": " .. tostring(lib), 4)
end

-- The first candidate for libresv on package.cpath that exists but that
-- this process may not read (a folder its user cannot enter: nginx's
-- workers under another user than the checkout's owner), as
-- "path: Permission denied (uid N)"; nil when there is none.
local function unreadable_candidate()
  for template in package.cpath:gmatch("[^;]+") do
    local path = template:gsub("%?", "libresv")
    local file, err = io.open(path, "rb")
    if file then
      file:close()
    elseif err and err:find("Permission denied", 1, true) then
      pcall(ffi.cdef, "unsigned int getuid(void);")
      local ok, uid = pcall(function() return ffi.C.getuid() end)
      return err .. (ok and " (uid " .. tostring(uid) .. ")" or "")
    end
  end
  return nil
end

local function load_library()
  local path = package.searchpath("libresv", package.cpath)
  if path == nil then
    local found, recorded = pcall(require, "resv.libpath")
    local file = found and type(recorded) == "string" and io.open(recorded)
    if file then
      file:close()
      path = recorded
    end
  end
  if path then
    local lib = load_from(path)
    return lib
  end
  local ok, lib = pcall(ffi.load, "resv")
  if ok then
    return lib
  end
  local ok0, lib0 = pcall(ffi.load, "libresv.so.0")
  if ok0 then
    return lib0
  end
  local denied = unreadable_candidate()
  if denied then
    error("resv: cannot read libresv: " .. denied .. "; give this process's user "
          .. "access to it, or install resv where every user can read it", 3)
  end
  error("resv: libresv not found on package.cpath (" .. package.cpath
        .. "), in resv.libpath, nor by the system loader: " .. tostring(lib)
        .. "; " .. tostring(lib0), 3)
end

return load_library()

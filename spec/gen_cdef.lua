-- Regenerates lua/resv/cdef.lua from csrc/resv.h (run from the repository
-- root: luajit spec/gen_cdef.lua, or make lua-cdef).
package.path = "./?.lua;" .. package.path
local f = assert(io.open("csrc/resv.h", "rb"))
local header = f:read("*a")
f:close()

local begin_marker = "/* RESV_CDEF_BEGIN */\n"
local b = assert(header:find(begin_marker, 1, true), "no RESV_CDEF_BEGIN")
local s = b + #begin_marker
local e = assert(header:find("/* RESV_CDEF_END */", s, true), "no RESV_CDEF_END")
local block = header:sub(s, e - 1)
assert(not block:find("]==]", 1, true), "the block contains ]==]")

local out = assert(io.open("lua/resv/cdef.lua", "wb"))
out:write(
  "-- resv.cdef: the C declarations of csrc/resv.h, for ffi.cdef.\n",
  "--\n",
  "-- This is a byte-for-byte copy of the text between the RESV_CDEF_BEGIN and\n",
  "-- RESV_CDEF_END lines of csrc/resv.h: the header is not installed next to\n",
  "-- the Lua files, so it cannot be read at load time. spec/cdef_spec.lua fails\n",
  "-- when the two drift; regenerate this file with `make lua-cdef`.\n",
  -- A long bracket drops the newline right after it, so the string
  -- starts exactly where the block does.
  "return [==[\n", block, "]==]\n")
out:close()

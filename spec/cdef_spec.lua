-- The Lua copy of the C declarations must be the header's, byte for byte.
local helpers = require "spec.helpers"

describe("resv.cdef", function()
  it("equals the RESV_CDEF block of csrc/resv.h byte for byte", function()
    local block = helpers.cdef_block(helpers.read_file("csrc/resv.h"))
    local copy = require "resv.cdef"
    if copy ~= block then
      error("lua/resv/cdef.lua has drifted from csrc/resv.h: run `make lua-cdef`")
    end
  end)

  it("declares every C function and constant the Lua modules use", function()
    local C = require "resv.ffi"
    local files = { "lua/resv.lua" }
    for path in io.popen("ls lua/resv/*.lua"):lines() do
      files[#files + 1] = path
    end
    local used = 0
    for _, path in ipairs(files) do
      for name in helpers.read_file(path):gmatch("C%.(RESV_[%w_]+)") do
        assert.is_not_nil(C[name], path .. ": " .. name)
        used = used + 1
      end
      for name in helpers.read_file(path):gmatch("C%.(resv_[%w_]+)") do
        assert.is_not_nil(C[name], path .. ": " .. name)
        used = used + 1
      end
    end
    assert.is_true(used > 30, "found only " .. used .. " uses of C")
  end)
end)

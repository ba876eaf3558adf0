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

  it("declares every function the module uses", function()
    local C = require "resv.ffi"
    for _, name in ipairs {
      "resv_store_open", "resv_store_shutdown", "resv_store_close",
      "resv_store_set_time", "resv_store_use_system_time", "resv_store_now",
      "resv_store_describe", "resv_store_type", "resv_type_collection",
      "resv_call", "resv_submit", "resv_job_done", "resv_job_wait",
      "resv_job_error", "resv_job_answer", "resv_job_destroy",
      "resv_inbox_new", "resv_inbox_destroy", "resv_inbox_fd",
      "resv_inbox_drain", "resv_inbox_wait", "resv_answer_clear",
      "resv_status_name", "resv_state_name", "resv_code_name", "resv_version",
    } do
      assert.is_not_nil(C[name], name)
    end
  end)
end)

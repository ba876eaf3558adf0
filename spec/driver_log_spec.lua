-- The driver's log lines (the log_level option, RESV_LOG): with nothing
-- listening, a call's monitor lines stay out of the output by default
-- (mongoc's own handler printed them, on stdout), and show on stderr,
-- naming the store, with log_level = "debug" or RESV_LOG=debug. Each case
-- runs in a fresh luajit (the log handler is the process's), making three
-- calls of 300 ms (the monitor logs a failed connection every 500 ms).
-- What the process wrote, on stdout and stderr.
local function output_of(env, options)
  local script = "local t = assert(assert(require('resv').open { uri = "
    .. "'mongodb://127.0.0.1:1/', timeout_ms = 300, threads = 1" .. options
    .. " }):type('log', 'spec')); "
    .. "for i = 1, 3 do t:get { namespace = 'n', key = 'k' } end"
  local p = assert(io.popen(env .. " luajit -e \"" .. script .. "\" 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

describe("the MongoDB driver's log", function()
  it("keeps the monitor's lines out of the output by default", function()
    assert.equal("", output_of("", ""))
  end)

  it("shows them, naming the store, with log_level = \"debug\"", function()
    assert.matches("resv: mongodb 127.0.0.1:1/resv: DEBUG: monitor: ",
                   output_of("", ", log_level = 'debug'"), 1, true)
  end)

  it("shows them with RESV_LOG=debug in the environment", function()
    assert.matches("resv: mongodb 127.0.0.1:1/resv: DEBUG: monitor: ",
                   output_of("RESV_LOG=debug", ""), 1, true)
  end)

  it("refuses a log_level it does not know", function()
    local store, err = require("resv").open { log_level = "verbose" }
    assert.is_nil(store)
    assert.matches("^invalid: log_level: ", err)
  end)
end)

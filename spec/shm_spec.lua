-- mongoc's shared-memory counters (/dev/shm/mongoc-<pid>, made as the
-- driver loads) leave nothing behind: resv removes the name as it loads,
-- so a process killed with SIGKILL leaves no file for a later process of
-- the same pid to trip on ("Falling back to malloc for counters").
local ffi = require "ffi"
require "resv"

pcall(ffi.cdef, "int getpid(void);")

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

describe("mongoc's shared-memory counters", function()
  it("have no name in /dev/shm once resv is loaded", function()
    assert.is_false(exists("/dev/shm/mongoc-" .. ffi.C.getpid()))
  end)

  it("are not left behind by a process killed with SIGKILL", function()
    local script = "local ffi = require 'ffi'; require 'resv'; "
      .. "ffi.cdef 'int getpid(void); int kill(int, int);'; "
      .. "io.write(ffi.C.getpid()); io.flush(); ffi.C.kill(ffi.C.getpid(), 9)"
    local p = assert(io.popen("exec luajit -e \"" .. script .. "\""))
    local pid = p:read("*a")
    p:close()
    assert.matches("^%d+$", pid)
    local left = "/dev/shm/mongoc-" .. pid
    local found = exists(left)
    os.remove(left)
    assert.is_false(found, left .. " was left behind")
  end)
end)

-- Shared by the specs: the backends to run against, the ways to call, and
-- the header's CDEF block.
local resv = require "resv"

local _M = {}

-- A fixed instant for the frozen clock (2023-11-14T22:13:20Z).
_M.T0 = 1700000000000

-- The text between the RESV_CDEF_BEGIN line and the RESV_CDEF_END line.
function _M.cdef_block(header)
  local begin_marker = "/* RESV_CDEF_BEGIN */\n"
  local b = assert(header:find(begin_marker, 1, true), "no RESV_CDEF_BEGIN")
  local s = b + #begin_marker
  local e = assert(header:find("/* RESV_CDEF_END */", s, true),
                   "no RESV_CDEF_END")
  return header:sub(s, e - 1)
end

function _M.read_file(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

-- A path for a file store that nothing uses yet (the store makes the
-- directory); _M.remove_dir deletes it. The process id is in the name:
-- math.random is unseeded, so two runs started in the same second would
-- otherwise share their directories.
local dir_serial = 0
local getpid
do
  local ffi = require "ffi"
  pcall(ffi.cdef, "int getpid(void);")
  getpid = function() return ffi.C.getpid() end
end
function _M.fresh_dir()
  dir_serial = dir_serial + 1
  local tmp = os.getenv("TMPDIR")
  if not tmp or tmp == "" then tmp = "/tmp" end
  return string.format("%s/resv-spec-%d-%d-%x-%d", tmp, getpid(), os.time(),
                       math.random(0, 0xffffff), dir_serial)
end

function _M.remove_dir(path)
  os.remove(path .. "/data.mdb")
  os.remove(path .. "/lock.mdb")
  os.remove(path .. "/resv.state")
  os.remove(path .. "/resv.state.tmp")
  os.remove(path .. "/resv.gate")
  os.remove(path)
end

-- Deletes the directories of the file stores in list (from _M.backends):
-- a spec that asks for them removes them in a file-level teardown.
function _M.remove_backends(list)
  for _, backend in ipairs(list) do
    if backend.dir then _M.remove_dir(backend.dir) end
  end
end

-- The stores every rule runs on: memory always, MongoDB when
-- RESV_TEST_URI names one (scripts/with-mongo sets it), and with
-- { file = true } the file store, sync "process" and "disk" (each its
-- own directory, in backend.dir).
function _M.backends(opts)
  local list = { { name = "memory", options = {} } }
  if opts and opts.file then
    for _, sync in ipairs({ "process", "disk" }) do
      local dir = _M.fresh_dir()
      list[#list + 1] = { name = "file (sync " .. sync .. ")", dir = dir,
                          options = { path = dir, sync = sync } }
    end
  end
  local uri = os.getenv("RESV_TEST_URI")
  if uri and uri ~= "" then
    list[#list + 1] = { name = "mongodb", options = { uri = uri } }
  end
  return list
end

function _M.mongo_uri()
  local uri = os.getenv("RESV_TEST_URI")
  if uri and uri ~= "" then
    return uri
  end
  return nil
end

-- A context name no other test uses, so each test has empty collections.
local serial = 0
local run_id = string.format("%x%x", os.time() % 0x10000,
                             math.random(0, 0xffff))
function _M.fresh_context()
  serial = serial + 1
  return "spec" .. run_id .. "x" .. serial
end

function _M.open(backend, extra)
  local options = {}
  for k, v in pairs(backend.options) do options[k] = v end
  for k, v in pairs(extra or {}) do options[k] = v end
  local store, err = resv.open(options)
  assert(store, err)
  return store
end

-- A fresh type of a fresh store, the clock frozen at T0.
function _M.fresh_type(backend, extra)
  local store = _M.open(backend, extra)
  assert(store:set_time(_M.T0))
  local t = assert(store:type(_M.fresh_context(), "user"))
  return store, t
end

-- Runs fn() in the given mode and returns what it returned:
--   "blocking": called directly, each call blocks;
--   "spawn":    in a coroutine of resv.spawn, driven by resv.run().
function _M.in_mode(mode, fn)
  if mode == "blocking" then
    return fn()
  end
  local results
  resv.spawn(function()
    results = { fn() }
  end)
  local ok, failures = resv.run()
  if not ok then
    -- A failed assertion of busted's is a table: its message says what.
    for i, f in ipairs(failures) do
      failures[i] = type(f) == "table" and tostring(f.message or f) or f
    end
    error(table.concat(failures, "\n"), 2)
  end
  assert(results, "the spawned function did not finish")
  return unpack(results)
end

_M.modes = { "blocking", "spawn" }

-- Sleeps ms milliseconds (poll(2) with no descriptors).
local ffi = require "ffi"
if not pcall(ffi.typeof, "struct resv_spec_pollfd") then
  ffi.cdef [[
    struct resv_spec_pollfd { int fd; short events; short revents; };
    int poll(struct resv_spec_pollfd *fds, unsigned long nfds, int timeout);
  ]]
end
function _M.sleep_ms(ms)
  ffi.C.poll(nil, 0, ms)
end

-- Waits up to ms for descriptor fd to be readable; true when it is.
function _M.readable(fd, ms)
  local p = ffi.new("struct resv_spec_pollfd[1]")
  p[0].fd = fd
  p[0].events = 1 -- POLLIN
  return ffi.C.poll(p, 1, ms) == 1
end

-- Sets MongoDB's failCommand fail point on the server at uri (pymongo,
-- through Debian's python3): data is the fail point's `data` document as
-- a Python literal, times how many commands it applies to. Scope it with
-- appName (the URI's `appname`) so other tests are not affected.
function _M.fail_point(uri, times, data)
  local script = table.concat({
    "import sys, pymongo",
    "c = pymongo.MongoClient(sys.argv[1], directConnection=True)",
    "c.admin.command({'configureFailPoint': 'failCommand', 'mode': {'times': "
      .. times .. "}, 'data': " .. data .. "})",
  }, "; ")
  local ok = os.execute("/usr/bin/python3 -c \"" .. script .. "\" '" .. uri .. "'")
  assert(ok == true or ok == 0, "configureFailPoint failed")
end

-- The C functions the fork specs need.
if not pcall(ffi.typeof, "resv_spec_pid_t") then
  ffi.cdef [[
    typedef int resv_spec_pid_t;
    resv_spec_pid_t fork(void);
    resv_spec_pid_t waitpid(resv_spec_pid_t pid, int *status, int options);
    void _exit(int status);
  ]]
end

-- Runs child() in a forked process and returns its exit code: child's
-- result (true: 0, false or an error: 1). The child ends with _exit, so
-- nothing of busted's runs in it.
function _M.in_child(child)
  local pid = ffi.C.fork()
  assert(pid >= 0, "fork failed")
  if pid == 0 then
    local ok, result = pcall(child)
    if not ok then io.stderr:write("child: ", tostring(result), "\n") end
    io.stderr:flush()
    ffi.C._exit((ok and result) and 0 or 1)
  end
  local status = ffi.new("int[1]")
  assert(ffi.C.waitpid(pid, status, 0) == pid)
  return math.floor(status[0] / 256)
end

return _M

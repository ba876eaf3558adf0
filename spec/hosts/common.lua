-- What the host tests for luv, Neovim, cqueues and LÖVE share (each runs
-- in its real host, against the MongoDB emulator or MONGODB_URI, which
-- scripts/with-mongo names in RESV_TEST_URI): checks and their verdict,
-- the failCommand fail point that makes calls wait, a store of the run's
-- own, and the stall measure.
--
-- A test ticks every 10 ms with its host's own timer while calls wait;
-- the stall is how late the latest tick ran. A call that waits 600 ms on
-- the server and blocks the loop makes a tick 600 ms late, which the
-- control of each test shows; a loaded machine alone has made a tick
-- 279 ms late (load average 11 on 2 cores), so the line is at 300 ms.
local resv = require "resv"
local C = require "resv.ffi"

local _M = {}

_M.TICK_MS = 10
_M.BLOCK_MS = 600
_M.STALL_LINE_MS = 300

local passed, failed = 0, 0

function _M.check(name, ok, detail)
  local line = (ok and "ok     " or "FAILED ") .. name .. (detail and (": " .. detail) or "")
  if ok then passed = passed + 1 else failed = failed + 1 end
  io.stdout:write(line, "\n")
  io.stdout:flush()
  return ok
end

-- Prints the closing line; true when nothing failed.
function _M.finish()
  io.stdout:write(("%d passed, %d failed\n"):format(passed, failed))
  io.stdout:flush()
  return failed == 0 and passed > 0
end

function _M.clock()
  return tonumber(C.resv_clock_ms())
end

local function random_hex()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(6) or tostring(os.time())
  if f then f:close() end
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

_M.uri = os.getenv("RESV_TEST_URI")

-- Sets failCommand on the server: the next `times` findAndModify of
-- application `app` wait ms on the server.
function _M.block(app, times, ms)
  local script = "import sys, pymongo; c = pymongo.MongoClient(sys.argv[1], directConnection=True); "
    .. "c.admin.command({'configureFailPoint': 'failCommand', 'mode': {'times': " .. times
    .. "}, 'data': {'failCommands': ['findAndModify'], 'blockConnection': True, "
    .. "'blockTimeMS': " .. ms .. ", 'appName': '" .. app .. "'}})"
  local ok = os.execute("/usr/bin/python3 -c \"" .. script .. "\" '" .. _M.uri .. "'")
  assert(ok == 0 or ok == true, "configureFailPoint failed")
end

-- A MongoDB store and type of this run's own (its own application name, so
-- its fail points touch nothing else): store, type, app.
function _M.open(host)
  assert(_M.uri and _M.uri ~= "", "RESV_TEST_URI is not set (run under scripts/with-mongo)")
  local app = host .. random_hex()
  local store = assert(resv.open { uri = _M.uri .. (_M.uri:find("?", 1, true) and "&" or "?")
                                   .. "appname=" .. app, threads = 24 })
  local t = assert(store:type(app, "user"))
  return store, t, app
end

-- A stall meter: tick() from the host's 10 ms timer; worst() is how late
-- the latest tick ran (ms) since reset().
function _M.meter()
  local m = { last = nil, late = 0 }
  function m.reset()
    m.last, m.late = _M.clock(), 0
  end
  function m.tick()
    local now = _M.clock()
    if m.last then
      m.late = math.max(m.late, now - m.last - _M.TICK_MS)
    end
    m.last = now
  end
  function m.worst()
    -- A loop stalled right now has not ticked yet: count that too.
    return math.max(m.late, _M.clock() - m.last - _M.TICK_MS)
  end
  return m
end

-- The workload: n tasks, each reserving two keys of its own and confirming
-- the first; the first n findAndModify wait BLOCK_MS on the server.
-- task(i) runs in whatever coroutine the host gives it; results[i] is true
-- when every answer was right.
function _M.workload(t, app, n)
  _M.block(app, n, _M.BLOCK_MS)
  local results, done = {}, 0
  local w = {}
  function w.task(i)
    local owner = { id = "o" .. i }
    local a = t:reserve({ namespace = "n", key = "a" .. i }, owner, "x", 60000)
    local b = t:reserve({ namespace = "n", key = "b" .. i }, owner, "x", 60000)
    local c = t:confirm({ namespace = "n", key = "a" .. i }, owner, 1)
    results[i] = a and a.status == "reserved" and a.owner.id == owner.id
                 and b and b.status == "reserved"
                 and c and c.status == "confirmed" or false
    done = done + 1
  end
  function w.done() return done end
  function w.right()
    local right = 0
    for i = 1, n do if results[i] then right = right + 1 end end
    return right
  end
  return w
end

-- A blocking call for the controls: outside a spawned coroutine it waits
-- on the loop's own thread for BLOCK_MS (after _M.block(app, 1, BLOCK_MS),
-- which takes a while itself: call it before the meter starts).
function _M.blocking_call(t)
  return t:reserve({ namespace = "n", key = "blocking" .. random_hex() }, { id = "o" }, "x", 60000)
end

return _M

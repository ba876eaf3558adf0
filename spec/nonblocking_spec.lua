-- A coroutine of resv.spawn is never blocked by a file store: not by a
-- writer frozen inside a commit (resv_freeze, built beside libresv), not
-- by store:close() while a call waits for that writer.
local resv = require "resv"
local C = require "resv.ffi"
local helpers = require "spec.helpers"

local KEY = { namespace = "email", key = "k@x" }
local OWNER = { id = "o1" }
local WATCHDOG_S = 3 -- the frozen writer goes on by then, whatever happens

local function now_ms()
  return tonumber(C.resv_clock_ms())
end

local function build_dir()
  return (os.getenv("LUA_CPATH") or ""):match("^([^;?]*)/%?%.so") or "build"
end

-- Starts resv_freeze on dir and returns once it holds the store's write
-- gate and LMDB's writer lock: its pipe and pid. A watchdog continues it
-- after WATCHDOG_S, so that a store that waits fails instead of hanging.
local function freeze(dir)
  local p = assert(io.popen(build_dir() .. "/resv_freeze " .. dir))
  local word, pid = assert(p:read("*l")):match("^(%a+) (%d+)$")
  assert.equal("held", word)
  os.execute("(sleep " .. WATCHDOG_S .. "; kill -CONT " .. pid .. ") >/dev/null 2>&1 &")
  return p, pid
end

local function thaw(p, pid)
  os.execute("kill -CONT " .. pid)
  p:close()
end

describe("a file store with sync = process, in spawned coroutines", function()
  local dir

  before_each(function()
    dir = helpers.fresh_dir()
  end)

  after_each(function()
    collectgarbage()
    collectgarbage()
    helpers.remove_dir(dir)
  end)

  it("answers a write timeout by its deadline while a writer is frozen, and reads at once",
     function()
    local store = assert(resv.open { path = dir, sync = "process", timeout_ms = 300 })
    local t = assert(store:type("shop", "nb"))
    assert.equal("reserved", assert(t:reserve(KEY, OWNER, "a", 60000)).status)
    local p, pid = freeze(dir)
    local a, ticks, t0 = {}, 0, now_ms()
    local ok, err = pcall(function()
      resv.spawn(function()
        a.write = { t:reserve({ namespace = "email", key = "new@x" }, OWNER, "a", 60000) }
        a.write_ms = now_ms() - t0
      end)
      a.spawned_ms = now_ms() - t0
      resv.spawn(function()
        a.read = t:get(KEY)
        a.conflict = t:reserve(KEY, { id = "o2" }, "a", 60000)
      end)
      resv.spawn(function() -- the rest of the program, meanwhile
        while a.write == nil do
          ticks = ticks + 1
          coroutine.yield()
        end
      end)
      assert.is_true(resv.run())
    end)
    thaw(p, pid)
    assert(ok, err)
    assert.is_true(a.spawned_ms < 300, a.spawned_ms)
    assert.is_nil(a.write[1])
    assert.matches("^timeout:", a.write[2])
    assert.is_true(a.write_ms < 300 + 250 + 250, a.write_ms)
    assert.equal("pending", a.read.status)
    assert.equal("conflict", a.conflict.status)
    assert.is_true(ticks > 1)
    local r
    resv.spawn(function()
      r = t:reserve({ namespace = "email", key = "later@x" }, OWNER, "a", 60000)
    end)
    assert.is_true(resv.run())
    assert.equal("reserved", r.status)
    store:close()
  end)

  it("parks a reserve_all of two keys that would wait for a frozen writer, then answers it",
     function()
    -- The try on the caller's thread would wait: the call goes on as a
    -- waiting call, with the strings it read (temporaries, gone by then).
    local store = assert(resv.open { path = dir, sync = "process", timeout_ms = 2500 })
    local t = assert(store:type("shop", "nb"))
    assert.equal("reserved", assert(t:reserve(KEY, OWNER, "a", 60000)).status)
    local p, pid = freeze(dir)
    local r, err
    local ok, perr = pcall(function()
      resv.spawn(function()
        r, err = t:reserve_all({ { namespace = "email", key = string.format("%s@%s", "ann", "x") },
                                 { namespace = "user", key = string.rep("n", 2) } },
                               { id = "o" .. 2 }, "a" .. 3, 60000)
      end)
      assert.is_nil(r) -- parked
      collectgarbage()
      collectgarbage()
    end)
    thaw(p, pid)
    assert(ok, perr)
    assert.is_true(resv.run())
    assert(r, err)
    assert.equal("reserved", r.status)
    for _, k in ipairs { { namespace = "email", key = "ann@x" }, { namespace = "user", key = "nn" } } do
      local g = assert(t:get(k))
      assert.equal("pending", g.status)
      assert.equal("o2", g.owner.id)
      assert.same({ "a3" }, g.holds)
    end
    store:close()
  end)

  it("closes at once while a call waits for a frozen writer", function()
    local store = assert(resv.open { path = dir, sync = "process", timeout_ms = 1500 })
    local t = assert(store:type("shop", "nb"))
    assert.equal("reserved", assert(t:reserve(KEY, OWNER, "a", 60000)).status)
    local p, pid = freeze(dir)
    local answer, closed_ms, t0 = nil, nil, now_ms()
    local ok, err = pcall(function()
      resv.spawn(function()
        answer = { t:reserve({ namespace = "email", key = "new@x" }, OWNER, "a", 60000) }
      end)
      resv.spawn(function()
        store:close()
        closed_ms = now_ms() - t0
      end)
      assert.is_true(resv.run())
    end)
    thaw(p, pid)
    assert(ok, err)
    assert.is_true(closed_ms < 1000, closed_ms)
    assert.is_nil(answer[1]) -- the call ended without a reservation
    assert.matches("^%a+:", answer[2])
  end)
end)

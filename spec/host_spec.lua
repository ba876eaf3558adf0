-- The host is decided once, when resv loads, and only its waiter is
-- loaded; a call crosses into C no more often than it needs. Each test
-- loads resv afresh (the other specs' modules are put back after), over a
-- resv.ffi whose functions count their calls.
local helpers = require "spec.helpers"

-- Every module of resv that holds resv.ffi or is installed into another's
-- tables: a fresh resv.type installs resv.all and resv.tools into its own
-- Type, which must not touch the Type of the other specs' types.
local MODULES = { "resv", "resv.type", "resv.all", "resv.tools", "resv.answer",
                  "resv.sched", "resv.host", "resv.ngx", "resv.tarantool", "resv.base",
                  "resv.ffi", "resv.metrics" }

-- Loads resv afresh over a counting resv.ffi; returns resv, the counts
-- (function name -> calls; only those of the coroutine counts.only when it
-- is set) and a function that puts the modules back.
local function fresh_resv()
  local saved = {}
  for _, name in ipairs(MODULES) do
    saved[name] = package.loaded[name]
    package.loaded[name] = nil
  end
  local real = saved["resv.ffi"] or require "resv.ffi"
  local counts = {}
  package.loaded["resv.ffi"] = setmetatable({}, {
    __index = function(t, name)
      local v = real[name]
      if type(v) ~= "cdata" then return v end
      local f = function(...)
        local only = rawget(counts, "only")
        if only == nil or coroutine.running() == only then
          counts[name] = (counts[name] or 0) + 1
        end
        return v(...)
      end
      rawset(t, name, f)
      return f
    end,
  })
  local resv = require "resv"
  local function restore()
    for _, name in ipairs(MODULES) do package.loaded[name] = saved[name] end
  end
  return resv, counts, restore
end

local function clear(counts)
  for k in pairs(counts) do counts[k] = nil end
end

describe("the host", function()
  it("is decided at load, and only its waiter is loaded", function()
    local _, _, restore = fresh_resv()
    finally(restore)
    assert.equal("plain", package.loaded["resv.host"].name)
    assert.is_nil(package.loaded["resv.ngx"])
    assert.is_nil(package.loaded["resv.tarantool"])
  end)

  it("makes a waited call cross into C as often as the C API needs", function()
    local resv, counts, restore = fresh_resv()
    finally(restore)
    local dir = helpers.fresh_dir()
    -- sync = "disk": every call waits for a dispatcher thread.
    local store = assert(resv.open { path = dir, sync = "disk" })
    local t = assert(store:type("host", "crossings"))
    local owner = { id = "o" }
    assert(t:reserve({ namespace = "n", key = "warm" }, owner, "a", 1000))
    clear(counts)
    assert.equal("reserved", assert(t:reserve({ namespace = "n", key = "k0" }, owner, "a", 1000)).status)
    assert.same({ resv_call_args = 1 }, counts)

    local answered
    resv.spawn(function() -- makes the scheduler's inbox
      assert(t:reserve({ namespace = "n", key = "warm" }, owner, "a", 1000))
    end)
    assert(resv.run())
    resv.spawn(function()
      clear(counts)
      counts.only = coroutine.running()
      answered = assert(t:reserve({ namespace = "n", key = "k1" }, owner, "a", 1000))
    end)
    assert(resv.run())
    counts.only = nil
    assert.equal("reserved", answered.status)
    -- The fork generation (the scheduler's state is this process's), the
    -- clock (for a timeout's message), submit, a look at the job, its
    -- deadline, its answer, its destroy. resv.run's own calls, which serve
    -- every waiting coroutine at once, are not counted.
    assert.same({ resv_process_generation = 1, resv_clock_ms = 1, resv_submit_args = 1,
                  resv_job_done = 1, resv_job_deadline = 1, resv_job_answer = 1,
                  resv_job_destroy = 1 }, counts)
    store:close()
    helpers.remove_dir(dir)
  end)

  it("makes a waited call in nginx cross into C as often as the C API needs", function()
    local resv, counts, restore = fresh_resv()
    local saved_semaphore = package.loaded["ngx.semaphore"]
    package.loaded["ngx.semaphore"] = {
      new = function() return { wait = function() return true end, post = function() end } end,
    }
    local ngxwait = require "resv.ngx"
    -- A content phase whose pool thread runs at once, in this Lua state:
    -- its calls are not counted (in nginx they are the thread's).
    ngxwait._use {
      get_phase = function() return "content" end,
      sleep = function() end,
      timer = { at = function() return true end },
      run_worker_thread = function(_, module, fn, ...)
        counts.only = {}
        local r = require(module)[fn](...)
        counts.only = nil
        return true, r
      end,
    }
    finally(function()
      ngxwait._use(nil)
      package.loaded["ngx.semaphore"] = saved_semaphore
      restore()
    end)
    assert.equal("ngx", package.loaded["resv.host"].name)
    local dir = helpers.fresh_dir()
    local store = assert(resv.open { path = dir, sync = "disk" })
    local t = assert(store:type("host", "crossings"))
    local owner = { id = "o" }
    local answered
    local request = coroutine.wrap(function()
      assert(t:reserve({ namespace = "n", key = "warm" }, owner, "a", 1000))
      clear(counts)
      answered = assert(t:reserve({ namespace = "n", key = "k" }, owner, "a", 1000))
    end)
    request()
    assert.equal("reserved", answered.status)
    -- The fork generation (the worker's inbox is this process's), the
    -- clock, submit, a look at the job, its deadline, the drain of the
    -- inbox once the pool thread's wait returns, the answer, the destroy.
    assert.same({ resv_process_generation = 1, resv_clock_ms = 1, resv_submit_args = 1,
                  resv_job_done = 1, resv_job_deadline = 1, resv_inbox_drain = 1,
                  resv_job_answer = 1, resv_job_destroy = 1 }, counts)
    store:close()
    helpers.remove_dir(dir)
  end)
end)

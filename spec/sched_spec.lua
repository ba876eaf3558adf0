-- resv.spawn, resv.poll, resv.run and resv.fd.
local resv = require "resv"
local helpers = require "spec.helpers"

local OWNER = { id = "user-1" }
local KEY = { namespace = "email", key = "k" }

describe("resv.spawn", function()
  it("runs the function at once with its arguments", function()
    local got
    resv.spawn(function(a, b) got = a + b end, 2, 3)
    assert.equal(5, got)
    assert.is_true(resv.run())
  end)

  it("answers a memory store call without yielding", function()
    local store, t = helpers.fresh_type(helpers.backends()[1])
    local r
    local co = resv.spawn(function() r = t:reserve(KEY, OWNER, "a", 100) end)
    assert.equal("dead", coroutine.status(co))
    assert.equal("reserved", r.status)
    store:close()
  end)

  it("resumes a coroutine that yielded on its own at the next poll", function()
    local steps = {}
    resv.spawn(function()
      steps[#steps + 1] = 1
      coroutine.yield()
      steps[#steps + 1] = 2
    end)
    assert.same({ 1 }, steps)
    local n, failures = resv.poll()
    assert.equal(1, n)
    assert.is_nil(failures)
    assert.same({ 1, 2 }, steps)
    assert.is_true(resv.run())
  end)

  it("reports an error with its traceback and lets the others go on", function()
    local done = 0
    resv.spawn(function() done = done + 1 end)
    resv.spawn(function() error("boom in a spawned coroutine") end)
    resv.spawn(function() coroutine.yield(); done = done + 1 end)
    resv.spawn(function() coroutine.yield(); error({ not_a_string = true }) end)
    local ok, failures = resv.run()
    assert.is_false(ok)
    assert.equal(2, done)
    assert.equal(2, #failures)
    assert.matches("boom in a spawned coroutine", failures[1])
    assert.matches("stack traceback", failures[1])
    -- Reported once: the next run has nothing to say.
    assert.is_true(resv.run())
  end)

  it("reports errors through poll too", function()
    resv.spawn(function() coroutine.yield(); error("later") end)
    local _, failures = resv.poll()
    assert.equal(1, #failures)
    assert.matches("later", failures[1])
    assert.is_nil(select(2, resv.poll()))
  end)

  it("refuses poll and run from a spawned coroutine", function()
    resv.spawn(function()
      assert.has_error(function() resv.poll() end)
      assert.has_error(function() resv.run() end)
    end)
    assert.is_true(resv.run())
  end)

  it("returns at once from poll when nothing waits", function()
    local n, failures = resv.poll()
    assert.equal(0, n)
    assert.is_nil(failures)
  end)

  it("hands a registered foreign yield to its taker, which resumes the coroutine with results", function()
    local sched = require "resv.sched"
    local MARK = {}
    local taken
    sched.foreign_yield(MARK, function(co, a, b) taken = { co = co, a = a, b = b } end)
    local got
    local co = resv.spawn(function() got = { coroutine.yield(MARK, 1, 2) } end)
    resv.poll() -- not resumed as "wait one frame": the taker holds it
    assert.is_nil(got)
    assert.same({ co = co, a = 1, b = 2 }, taken)
    assert.is_false(sched.turn_pending())
    sched.resume(co, "x", "y")
    sched.foreign_yield(MARK, nil)
    assert.same({ "x", "y" }, got)
    assert.equal(0, resv.pending())
  end)

  it("ends a coroutine that yields a cqueues wait when no pump serves it", function()
    local saved = package.loaded.cqueues
    local POLL = {}
    package.loaded.cqueues = { _POLL = POLL } -- what cqueues.sleep yields
    local after
    resv.spawn(function() coroutine.yield(POLL, 0.5); after = true end)
    local _, failures = resv.poll()
    package.loaded.cqueues = saved
    assert.is_nil(after)
    assert.equal(0, resv.pending())
    assert.matches("no resv.cqueues pump serves it", failures[1])
  end)

  it("gives a descriptor", function()
    local fd = resv.fd()
    assert.is_number(fd)
    assert.is_true(fd >= 0)
    assert.equal(fd, resv.fd())
  end)
end)

for _, backend in ipairs(helpers.backends()) do
  describe("many coroutines on " .. backend.name, function()
    it("1000 coroutines reserving 100 keys: one owner per key, all answered", function()
      local store, t = helpers.fresh_type(backend, { queue = 2048 })
      local answers, errors = {}, {}
      for i = 1, 1000 do
        resv.spawn(function()
          local key = { namespace = "name", key = "k" .. (i % 100) }
          local r, err = t:reserve(key, { id = "owner-" .. i }, "a" .. i, 60000)
          answers[i], errors[i] = r, err
        end)
      end
      assert.is_true(resv.run())
      local owners = {}
      for i = 1, 1000 do
        assert.is_nil(errors[i])
        local r = answers[i]
        assert.is_table(r)
        local k = i % 100
        if r.status == "reserved" then
          assert.is_nil(owners[k], "two owners for key " .. k)
          owners[k] = r.owner.id
          assert.equal("owner-" .. i, r.owner.id)
        else
          assert.equal("conflict", r.status)
        end
      end
      for i = 1, 1000 do
        local k = i % 100
        assert.is_string(owners[k])
        if answers[i].status == "conflict" then
          assert.equal(owners[k], answers[i].owner.id)
        end
      end
      -- The store agrees.
      for k = 0, 99 do
        local r = assert(t:get({ namespace = "name", key = "k" .. k }))
        assert.equal("pending", r.status)
        assert.equal(owners[k], r.owner.id)
      end
      store:close()
    end)

    it("blocking and spawned calls give the same answers", function()
      local function script(store, t)
        local out = {}
        local A, B = { id = "a" }, { tenant = "t", id = "b" }
        local k1, k2 = { namespace = "n", key = "1" }, { tenant = "x", namespace = "n", key = "2" }
        out[#out + 1] = { t:reserve(k1, A, "a1", 1000) }
        out[#out + 1] = { t:reserve(k1, A, "a2", 3000) }
        out[#out + 1] = { t:reserve(k1, B, "b1", 1000) }
        out[#out + 1] = { t:get(k1) }
        out[#out + 1] = { t:abandon(k1, A, "a1") }
        out[#out + 1] = { t:confirm(k1, A, 4) }
        out[#out + 1] = { t:confirm(k2, B, 2) }
        out[#out + 1] = { t:reserve(k2, A, "a1", 10) }
        store:set_time(helpers.T0 + 5000)
        out[#out + 1] = { t:get(k2) }
        out[#out + 1] = { t:release(k2, B) }
        out[#out + 1] = { t:get(k2) }
        out[#out + 1] = { t:reserve(k1, B, "", 10) }
        return out
      end
      local s1, t1 = helpers.fresh_type(backend)
      local s2, t2 = helpers.fresh_type(backend)
      local blocking = script(s1, t1)
      local spawned = helpers.in_mode("spawn", function() return script(s2, t2) end)
      assert.same(blocking, spawned)
      assert.equal("reserved", blocking[1][1].status)
      assert.matches("^invalid", blocking[#blocking][2])
      s1:close()
      s2:close()
    end)

    it("a plain coroutine (not spawned) blocks instead of yielding", function()
      local store, t = helpers.fresh_type(backend)
      local co = coroutine.create(function()
        return t:reserve(KEY, OWNER, "a", 100)
      end)
      local ok, r = coroutine.resume(co)
      assert.is_true(ok)
      assert.equal("dead", coroutine.status(co))
      assert.equal("reserved", r.status)
      store:close()
    end)

    it("poll, called once per frame, answers everything", function()
      local store, t = helpers.fresh_type(backend)
      local answered = 0
      for i = 1, 50 do
        resv.spawn(function()
          local r = assert(t:reserve({ namespace = "n", key = "f" .. i }, OWNER, "a", 1000))
          assert.equal("reserved", r.status)
          answered = answered + 1
        end)
      end
      local frames = 0
      while answered < 50 do
        local _, failures = resv.poll()
        assert.is_nil(failures)
        frames = frames + 1
        assert.is_true(frames < 100000)
        helpers.sleep_ms(1) -- a frame
      end
      assert.is_true(resv.run())
      store:close()
    end)
  end)
end

if helpers.mongo_uri() then
  describe("resv.fd", function()
    it("becomes readable when an answer waits", function()
      local store, t = helpers.fresh_type(helpers.backends()[2])
      local r
      resv.spawn(function() r = assert(t:reserve(KEY, OWNER, "a", 1000)) end)
      local fd = resv.fd()
      while not r do
        assert.is_true(helpers.readable(fd, 5000))
        resv.poll()
      end
      assert.equal("reserved", r.status)
      assert.is_true(resv.run())
      store:close()
    end)
  end)

  describe("resv.timeout", function()
    it("is nil when nothing waits, and a Lua number up to the call's deadline while one does", function()
      assert.is_nil(resv.timeout())
      local store, t = helpers.fresh_type(helpers.backends()[2], { timeout_ms = 4000 })
      local r
      resv.spawn(function() r = assert(t:reserve(KEY, OWNER, "a", 1000)) end)
      if r == nil then
        local ms = resv.timeout()
        -- A number a host's timer takes (luv's timer:start refused the
        -- int64 cdata it used to be).
        assert.equal("number", type(ms))
        assert.is_true(ms > 0 and ms <= 4000 + 1000, tostring(ms))
      end
      assert.is_true(resv.run())
      assert.equal("reserved", r.status)
      assert.is_nil(resv.timeout())
      store:close()
    end)
  end)

  describe("a full queue", function()
    it("answers busy at once and the rest normally", function()
      local store, t = helpers.fresh_type(helpers.backends()[2], { threads = 1, queue = 1 })
      local counts = {}
      for i = 1, 500 do
        resv.spawn(function()
          local r, err = t:reserve({ namespace = "n", key = "k" .. i }, OWNER, "a", 1000)
          local what = r and r.status or err:match("^%a+")
          counts[what] = (counts[what] or 0) + 1
        end)
      end
      assert.is_true(resv.run())
      assert.is_true((counts.busy or 0) > 0)
      assert.is_true((counts.reserved or 0) > 0)
      assert.equal(500, (counts.busy or 0) + (counts.reserved or 0))
      store:close()
    end)
  end)
end

-- Every call has a deadline, the store's timeout_ms or the call's own
-- { timeout_ms = n }, and answers `timeout` within it plus a small grace
-- in every waiting mode, whatever the driver's own timeouts say (docs/design.md
-- section 7; issue 11, finding 4). The server holds each findAndModify
-- far longer than the deadline (failCommand's blockConnection).
local resv = require "resv"
local helpers = require "spec.helpers"
local C = require "resv.ffi"
local function clock() return tonumber(C.resv_clock_ms()) end

local uri = helpers.mongo_uri()

-- The grace a waiter gives the worker past the deadline (RESV__DEADLINE_
-- GRACE_MS), and room for a loaded machine on top (the call blocked on the
-- server answers after 3 s without the deadline).
local GRACE_MS = 250
local SLACK_MS = 1000

local KEY = { namespace = "n", key = "slow" }
local OWNER = { id = "o" }

local function blocked_store(extra)
  local app = "deadline" .. math.random(1, 1e9)
  local options = {
    -- The driver would wait 20 s for the socket: only resv's own deadline
    -- can answer in time.
    uri = uri .. (uri:find("?", 1, true) and "&" or "?") .. "appname=" .. app
          .. "&socketTimeoutMS=20000",
  }
  for k, v in pairs(extra) do options[k] = v end
  local store = assert(resv.open(options))
  local t = assert(store:type(helpers.fresh_context(), "user"))
  helpers.fail_point(uri, 4, "{'failCommands': ['findAndModify'], 'blockConnection': True, "
                     .. "'blockTimeMS': 3000, 'appName': '" .. app .. "'}")
  return store, t
end

if uri then
  for _, mode in ipairs(helpers.modes) do
    describe("deadlines (" .. mode .. ")", function()
      it("answers timeout at the store's timeout_ms", function()
        local store, t = blocked_store { timeout_ms = 500 }
        local started = clock()
        local r, err = helpers.in_mode(mode, function()
          return t:reserve(KEY, OWNER, "a", 60000)
        end)
        local took = clock() - started
        assert.is_nil(r)
        assert.matches("^timeout", err)
        assert.is_true(took >= 500, "answered after " .. took .. " ms")
        assert.is_true(took < 500 + GRACE_MS + SLACK_MS, "answered after " .. took .. " ms")
        store:close()
      end)

      it("answers timeout at the call's own timeout_ms", function()
        local store, t = blocked_store { timeout_ms = 10000 }
        local started = clock()
        local r, err = helpers.in_mode(mode, function()
          return t:reserve(KEY, OWNER, "a", 60000, { timeout_ms = 300 })
        end)
        local took = clock() - started
        assert.is_nil(r)
        assert.matches("^timeout", err)
        assert.is_true(took >= 300, "answered after " .. took .. " ms")
        assert.is_true(took < 300 + GRACE_MS + SLACK_MS, "answered after " .. took .. " ms")
        store:close()
      end)
    end)
  end

  describe("deadlines of spawned calls", function()
    it("each coroutine gives up at its own deadline while the others wait on", function()
      local store, t = blocked_store { timeout_ms = 10000 }
      local started = clock()
      local answers = {}
      for _, ms in ipairs { 900, 200 } do
        resv.spawn(function()
          local r, err = t:reserve({ namespace = "n", key = "k" .. ms }, OWNER, "a", 60000,
                                   { timeout_ms = ms })
          answers[#answers + 1] = { ms = ms, took = clock() - started, err = err, r = r }
        end)
      end
      assert.is_true(resv.run())
      assert.equal(2, #answers)
      assert.equal(200, answers[1].ms)
      for _, a in ipairs(answers) do
        assert.is_nil(a.r)
        assert.matches("^timeout", a.err)
        assert.is_true(a.took >= a.ms and a.took < a.ms + GRACE_MS + SLACK_MS,
                       a.ms .. " ms call answered after " .. a.took .. " ms")
      end
      store:close()
    end)
  end)
end

describe("per-call options", function()
  local _, t = helpers.fresh_type({ name = "memory", options = {} })
  for _, case in ipairs {
    { "not a table", 5 },
    { "an unknown field", { timeout = 5 } },
    { "timeout_ms zero", { timeout_ms = 0 } },
    { "timeout_ms a fraction", { timeout_ms = 1.5 } },
    { "timeout_ms over a day", { timeout_ms = 24 * 3600 * 1000 + 1 } },
  } do
    it("refuses " .. case[1] .. " as invalid, on every call", function()
      local k = { namespace = "n", key = "k" }
      for _, call in ipairs {
        function() return t:reserve(k, OWNER, "a", 1000, case[2]) end,
        function() return t:confirm(k, OWNER, 1, case[2]) end,
        function() return t:abandon(k, OWNER, "a", case[2]) end,
        function() return t:release(k, OWNER, case[2]) end,
        function() return t:get(k, case[2]) end,
      } do
        local r, err = call()
        assert.is_nil(r)
        assert.matches("^invalid: .*", err)
      end
      assert.equal("absent", assert(t:get(k)).status)
    end)
  end

  it("takes a timeout_ms on every call", function()
    local k = { namespace = "n", key = "opts" }
    local o = { timeout_ms = 1000 }
    assert.equal("reserved", assert(t:reserve(k, OWNER, "a", 1000, o)).status)
    assert.equal("pending", assert(t:get(k, o)).status)
    assert.equal("confirmed", assert(t:confirm(k, OWNER, 1, o)).status)
    assert.equal("kept", assert(t:abandon(k, OWNER, "a", o)).status)
    assert.equal("released", assert(t:release(k, OWNER, o)).status)
  end)
end)

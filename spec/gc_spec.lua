-- Dropping stores, types and pending calls must neither crash nor leak
-- (the C side's leak checks run under ASan; here: no crash, no hang).
local resv = require "resv"
local helpers = require "spec.helpers"
local ngxwait = require "resv.ngx"

local KEY = { namespace = "n", key = "k" }
local OWNER = { id = "o" }

for _, backend in ipairs(helpers.backends()) do
  describe("collecting on " .. backend.name, function()
    it("opens and drops stores and types in a loop", function()
      for i = 1, 100 do
        local store = helpers.open(backend, { threads = 1 })
        local t = assert(store:type("gc", "user" .. (i % 3)))
        assert(t:reserve(KEY, OWNER, "a" .. i, 1000))
        if i % 2 == 0 then store:close() end
        store, t = nil, nil
        if i % 10 == 0 then collectgarbage() end
      end
      collectgarbage()
      collectgarbage()
    end)

    it("keeps a store alive while only its type is referenced", function()
      local t = assert(helpers.open(backend):type("gc", "kept"))
      collectgarbage()
      collectgarbage()
      assert.equal("reserved", assert(t:reserve(KEY, OWNER, "a", 1000)).status)
    end)

    it("finishes spawned calls whose store was dropped or closed", function()
      local answered = 0
      for round = 1, 5 do
        local store, t = helpers.fresh_type(backend)
        for i = 1, 20 do
          resv.spawn(function()
            local r, err = t:reserve({ namespace = "n", key = "k" .. i }, OWNER, "a", 1000)
            assert(r or err:match("^closed"), err)
            answered = answered + 1
          end)
        end
        if round % 2 == 0 then store:close() end
        store, t = nil, nil
        collectgarbage()
      end
      assert.is_true(resv.run())
      assert.equal(100, answered)
      collectgarbage()
    end)

    it("frees the job of a coroutine dropped while it waits", function()
      -- A fake nginx whose sleep parks the coroutine for good: the job is
      -- left to the collector, running or not.
      ngxwait._use({
        get_phase = function() return "content" end,
        sleep = function() coroutine.yield() end,
      })
      finally(function() ngxwait._use(nil) end)
      for _ = 1, 20 do
        local store, t = helpers.fresh_type(backend)
        for i = 1, 5 do
          local co = coroutine.create(function()
            return t:reserve({ namespace = "n", key = "k" .. i }, OWNER, "a", 1000)
          end)
          assert(coroutine.resume(co))
        end
        store, t = nil, nil
        collectgarbage()
      end
      collectgarbage()
      collectgarbage()
    end)
  end)
end

-- t:sweep() on every store (docs/design.md sections 5 "sweep" and 9): the count,
-- what it leaves (live, confirmed, within the grace), a swept key free
-- again, and sweeps interleaved with reserves of the same keys (spawned
-- coroutines: on MongoDB and the file store with sync "disk" they run on
-- the dispatcher at once) never deleting a live one.
local resv = require "resv"
local helpers = require "spec.helpers"

local T0 = helpers.T0
local GRACE = 1000

local function key(name)
  return { namespace = "email", key = name }
end

local BACKENDS = helpers.backends { file = true }
-- The file stores' directories go after the file's last test.
teardown(function() helpers.remove_backends(BACKENDS) end)

for _, backend in ipairs(BACKENDS) do
  describe("sweep on the " .. backend.name .. " store", function()
    local store, t

    before_each(function()
      store, t = helpers.fresh_type(backend, { sweep_grace_ms = GRACE })
    end)

    after_each(function()
      store:close()
    end)

    it("deletes the pending reservations expired for the grace, and answers the count", function()
      assert.same({ status = "swept", count = 0 }, assert(t:sweep()))
      for i = 1, 12 do
        assert.equal("reserved", assert(t:reserve(key("old" .. i), { id = "o" }, "a", 10)).status)
      end
      assert.equal("reserved", assert(t:reserve(key("young"), { id = "o" }, "a", 10 + GRACE + 1)).status)
      assert.equal("confirmed", assert(t:confirm(key("sure"), { id = "o" }, 7)).status)
      assert(store:set_time(T0 + 10 + GRACE - 1))
      assert.same({ status = "swept", count = 0 }, assert(t:sweep()))
      assert(store:set_time(T0 + 10 + GRACE))
      assert.same({ status = "swept", count = 12 }, assert(t:sweep({ timeout_ms = 5000 })))
      assert.equal("absent", assert(t:get(key("old1"))).status)
      assert.equal("pending", assert(t:get(key("young"))).status)
      assert.equal("confirmed", assert(t:get(key("sure"))).status)
      assert.equal("reserved", assert(t:reserve(key("old1"), { id = "p" }, "b", 10)).status)
    end)

    it("takes only timeout_ms as an option", function()
      local r, err = t:sweep({ limit = 3 })
      assert.is_nil(r)
      assert.matches("^invalid: ", err)
      assert.has_error(function() t.sweep(nil) end)
    end)

    it("racing reserves of the same keys, never deletes a live one", function()
      local n = 60
      for i = 1, n do
        assert(t:reserve(key("k" .. i), { id = "first" }, "f", 10))
      end
      assert(store:set_time(T0 + 10 + GRACE + 1))
      local taken, swept = {}, 0
      resv.spawn(function()
        for i = 1, n do
          local r = assert(t:reserve(key("k" .. i), { id = "taker" }, "t", 1e9))
          assert.equal("reserved", r.status)
          taken[#taken + 1] = i
        end
      end)
      resv.spawn(function()
        for _ = 1, 10 do
          swept = swept + assert(t:sweep()).count
        end
      end)
      resv.run()
      assert.equal(n, #taken)
      for i = 1, n do
        local r = assert(t:get(key("k" .. i)))
        assert.equal("pending", r.status)
        assert.equal("taker", r.owner.id)
      end
      assert.is_true(swept <= n)
      assert.same({ status = "swept", count = 0 }, assert(t:sweep()))
    end)
  end)
end

-- Versions and expiries are int64 in every store; a Lua number holds them
-- exactly only up to 2^53. Past that an answer carries the int64_t cdata
-- itself, never a rounded number, and confirm takes one back (docs/design.md
-- section 9; issue 11, finding 5).
local helpers = require "spec.helpers"

local KEY = { namespace = "n", key = "k" }
local OWNER = { id = "o" }

for _, backend in ipairs(helpers.backends()) do
  describe("integers past 2^53 on " .. backend.name, function()
    it("keeps a version of 2^53 + 1 exact, and confirms it again", function()
      local _, t = helpers.fresh_type(backend)
      local v = 9007199254740993LL
      local r = assert(t:confirm(KEY, OWNER, v))
      assert.equal("confirmed", r.status)
      assert.equal("cdata", type(r.version))
      assert.is_true(r.version == v)
      local got = assert(t:get(KEY))
      assert.is_true(got.version == v, tostring(got.version))
      r = assert(t:confirm(KEY, OWNER, got.version))
      assert.is_true(r.version == v)
    end)

    it("keeps a version of 2^63 - 1 exact, and confirms it again", function()
      local _, t = helpers.fresh_type(backend)
      local v = 0x7fffffffffffffffLL
      assert.equal("confirmed", assert(t:confirm(KEY, OWNER, v)).status)
      local got = assert(t:get(KEY))
      assert.is_true(got.version == v, tostring(got.version))
      local r = assert(t:confirm(KEY, OWNER, got.version))
      assert.equal("confirmed", r.status)
      assert.is_true(r.version == v)
      -- A smaller number keeps the larger stored version.
      assert.is_true(assert(t:confirm(KEY, OWNER, 5)).version == v)
    end)

    it("answers numbers while they are exact", function()
      local _, t = helpers.fresh_type(backend)
      local r = assert(t:confirm(KEY, OWNER, 2 ^ 53))
      assert.equal("number", type(r.version))
      assert.equal(2 ^ 53, r.version)
    end)

    it("reports an expiry of 2^53 + 1 exactly", function()
      local store, t = helpers.fresh_type(backend)
      assert(store:set_time(2 ^ 53))
      local r = assert(t:reserve(KEY, OWNER, "a", 1))
      assert.equal("reserved", r.status)
      assert.is_true(r.expires_at == 9007199254740993LL, tostring(r.expires_at))
      assert.is_true(assert(t:get(KEY)).expires_at == 9007199254740993LL)
      assert.is_true(store:now() == 2 ^ 53)
    end)

    it("refuses a number past 2^53, and a negative or too large cdata", function()
      local _, t = helpers.fresh_type(backend)
      for _, v in ipairs { 2 ^ 53 + 2, -1LL, 0xffffffffffffffffULL } do
        local r, err = t:confirm(KEY, OWNER, v)
        assert.is_nil(r)
        assert.matches("^invalid: version", err)
      end
      assert.equal("absent", assert(t:get(KEY)).status)
    end)
  end)
end

-- docs/design.md section 8: bad input answers invalid and writes nothing.
local helpers = require "spec.helpers"

local GOOD_KEY = { tenant = "", namespace = "email", key = "ann@example.com" }
local GOOD_OWNER = { tenant = "t1", id = "user-42" }
local LONG = string.rep("x", 1025) -- over the default max_string of 1024

-- Each case is a name and a call on t; the calls that name GOOD_KEY are
-- checked afterwards to have left it absent.
local cases = {
  { "key not a table", function(t) return t:reserve("k", GOOD_OWNER, "a", 100) end },
  { "key.namespace missing", function(t) return t:reserve({ key = "k" }, GOOD_OWNER, "a", 100) end },
  { "key.key a number", function(t) return t:reserve({ namespace = "n", key = 5 }, GOOD_OWNER, "a", 100) end },
  { "key.tenant a boolean", function(t) return t:reserve({ tenant = true, namespace = "n", key = "k" }, GOOD_OWNER, "a", 100) end },
  { "an empty namespace", function(t) return t:reserve({ namespace = "", key = "k" }, GOOD_OWNER, "a", 100) end },
  { "an empty key", function(t) return t:reserve({ namespace = "n", key = "" }, GOOD_OWNER, "a", 100) end },
  { "a key not UTF-8", function(t) return t:reserve({ namespace = "n", key = "\255\254" }, GOOD_OWNER, "a", 100) end },
  { "a key with a NUL byte", function(t) return t:reserve({ namespace = "n", key = "a\0b" }, GOOD_OWNER, "a", 100) end },
  { "a tenant with a NUL byte", function(t) return t:reserve({ tenant = "\0", namespace = "n", key = "k" }, GOOD_OWNER, "a", 100) end },
  { "a key over max_string", function(t) return t:reserve({ namespace = "n", key = LONG }, GOOD_OWNER, "a", 100) end },
  { "a truncated UTF-8 sequence", function(t) return t:confirm({ namespace = "n", key = "caf\195" }, GOOD_OWNER, 1) end },
  { "owner not a table", function(t) return t:reserve(GOOD_KEY, "user-42", "a", 100) end },
  { "owner.id missing", function(t) return t:reserve(GOOD_KEY, { tenant = "t1" }, "a", 100) end },
  { "an empty owner id", function(t) return t:reserve(GOOD_KEY, { id = "" }, "a", 100) end },
  { "an owner id not UTF-8", function(t) return t:confirm(GOOD_KEY, { id = "\192\128" }, 1) end },
  { "an owner tenant over max_string", function(t) return t:confirm(GOOD_KEY, { tenant = LONG, id = "u" }, 1) end },
  { "attempt not a string", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, 7, 100) end },
  { "an empty attempt", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "", 100) end },
  { "an attempt with a NUL byte", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a\0", 100) end },
  { "an attempt over max_string", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, LONG, 100) end },
  { "ttl missing", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a") end },
  { "ttl a string", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", "100") end },
  { "ttl zero", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", 0) end },
  { "ttl negative", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", -5) end },
  { "ttl a fraction", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", 0.5) end },
  { "ttl NaN", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", 0 / 0) end },
  { "ttl infinite", function(t) return t:reserve(GOOD_KEY, GOOD_OWNER, "a", math.huge) end },
  { "version missing", function(t) return t:confirm(GOOD_KEY, GOOD_OWNER) end },
  { "version negative", function(t) return t:confirm(GOOD_KEY, GOOD_OWNER, -1) end },
  { "version a fraction", function(t) return t:confirm(GOOD_KEY, GOOD_OWNER, 1.5) end },
  { "version NaN", function(t) return t:confirm(GOOD_KEY, GOOD_OWNER, 0 / 0) end },
  { "version infinite", function(t) return t:confirm(GOOD_KEY, GOOD_OWNER, -math.huge) end },
  { "abandon with an empty attempt", function(t) return t:abandon(GOOD_KEY, GOOD_OWNER, "") end },
  { "release without an owner", function(t) return t:release(GOOD_KEY) end },
  { "get without a key", function(t) return t:get() end },
}

for _, backend in ipairs(helpers.backends()) do
  for _, mode in ipairs(helpers.modes) do
    describe("bad input on " .. backend.name .. " (" .. mode .. ")", function()
      local store, t
      setup(function()
        store, t = helpers.fresh_type(backend)
      end)
      teardown(function()
        store:close()
      end)

      for _, case in ipairs(cases) do
        it("answers invalid for " .. case[1] .. " and writes nothing", function()
          local r, err = helpers.in_mode(mode, function() return case[2](t) end)
          assert.is_nil(r)
          assert.is_string(err)
          assert.matches("^invalid: ", err)
          assert.same({ status = "absent" }, assert(t:get(GOOD_KEY)))
          assert.same({ status = "absent" },
                      assert(t:get({ namespace = "n", key = "k" })))
        end)
      end

      it("honours a smaller max_string", function()
        local small_store, small = helpers.fresh_type(backend, { max_string = 8 })
        local k = { namespace = "n", key = "123456789" }
        local r, err = small:reserve(k, GOOD_OWNER, "a", 100)
        assert.is_nil(r)
        assert.matches("^invalid: ", err)
        k.key = "12345678"
        assert.equal("reserved", assert(small:reserve(k, GOOD_OWNER, "a", 100)).status)
        small_store:close()
      end)
    end)
  end
end

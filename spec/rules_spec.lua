-- docs/design.md section 5, rule by rule, through the Lua API: on the memory store,
-- the file store (sync process and disk), and MongoDB when RESV_TEST_URI
-- is set, each both blocking and spawned.
local helpers = require "spec.helpers"

local T0 = helpers.T0

local function key(k, tenant)
  return { tenant = tenant, namespace = "email", key = k or "ann@example.com" }
end
local A = { tenant = "", id = "user-a" }
local B = { id = "user-b" } -- tenant defaults to ""
local OWNER_A = { tenant = "", id = "user-a" }
local OWNER_B = { tenant = "", id = "user-b" }

for _, backend in ipairs(helpers.backends({ file = true })) do
  for _, mode in ipairs(helpers.modes) do
    describe("rules on " .. backend.name .. " (" .. mode .. ")", function()
      local store, t

      before_each(function()
        store, t = helpers.fresh_type(backend)
      end)

      after_each(function()
        store:close()
      end)

      -- Runs fn in this block's mode.
      local function go(fn)
        return helpers.in_mode(mode, fn)
      end

      it("reserve of a fresh key is reserved, pending, held by the attempt", function()
        local r, err = go(function() return t:reserve(key(), A, "a1", 1000) end)
        assert.is_nil(err)
        assert.same({ status = "reserved", owner = OWNER_A,
                      expires_at = T0 + 1000, holds = { "a1" } }, r)
      end)

      it("retrying the same attempt is idempotent", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          local r = assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "reserved", owner = OWNER_A,
                        expires_at = T0 + 1000, holds = { "a1" } }, r)
        end)
      end)

      it("a second attempt of the owner joins and keeps the later expiry", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          store:set_time(T0 + 100)
          local r = assert(t:reserve(key(), A, "a2", 500))
          assert.same({ status = "reserved", owner = OWNER_A,
                        expires_at = T0 + 1000, holds = { "a1", "a2" } }, r)
          r = assert(t:reserve(key(), A, "a3", 2000))
          assert.same({ status = "reserved", owner = OWNER_A,
                        expires_at = T0 + 2100, holds = { "a1", "a2", "a3" } }, r)
        end)
      end)

      it("another owner conflicts with a pending reservation", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          store:set_time(T0 + 999)
          local r = assert(t:reserve(key(), B, "b1", 1000))
          assert.same({ status = "conflict", owner = OWNER_A, state = "pending",
                        expires_at = T0 + 1000 }, r)
        end)
      end)

      it("another owner conflicts with a confirmed reservation", function()
        go(function()
          assert(t:confirm(key(), A, 3))
          local r = assert(t:reserve(key(), B, "b1", 1000))
          assert.same({ status = "conflict", owner = OWNER_A, state = "confirmed",
                        version = 3 }, r)
          r = assert(t:confirm(key(), B, 9))
          assert.same({ status = "conflict", owner = OWNER_A, state = "confirmed",
                        version = 3 }, r)
        end)
      end)

      it("reserving one's own confirmed key answers confirmed, unchanged", function()
        go(function()
          assert(t:confirm(key(), A, 3))
          local r = assert(t:reserve(key(), A, "a9", 1000))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 3 }, r)
          assert.same({ status = "confirmed", owner = OWNER_A, version = 3 },
                      assert(t:get(key())))
        end)
      end)

      it("another owner takes an expired reservation over", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          store:set_time(T0 + 1000) -- expires_at <= now: expired
          local r = assert(t:reserve(key(), B, "b1", 500))
          assert.same({ status = "reserved", owner = OWNER_B,
                        expires_at = T0 + 1500, holds = { "b1" } }, r)
          -- The old owner now conflicts and cannot confirm.
          r = assert(t:confirm(key(), A, 1))
          assert.same({ status = "conflict", owner = OWNER_B, state = "pending",
                        expires_at = T0 + 1500 }, r)
        end)
      end)

      it("the owner's own expired reservation starts afresh", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          store:set_time(T0 + 5000)
          local r = assert(t:reserve(key(), A, "a2", 1000))
          assert.same({ status = "reserved", owner = OWNER_A,
                        expires_at = T0 + 6000, holds = { "a2" } }, r)
        end)
      end)

      it("confirm keeps the larger version", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 5 },
                      assert(t:confirm(key(), A, 5)))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 5 },
                      assert(t:confirm(key(), A, 3)))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 7 },
                      assert(t:confirm(key(), A, 7)))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 7 },
                      assert(t:get(key())))
        end)
      end)

      it("confirm after one's own reservation expired succeeds if nobody took it", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 100))
          store:set_time(T0 + 10000)
          assert.same({ status = "confirmed", owner = OWNER_A, version = 1 },
                      assert(t:confirm(key(), A, 1)))
        end)
      end)

      it("confirm of a free key creates it confirmed", function()
        go(function()
          assert.same({ status = "confirmed", owner = OWNER_A, version = 0 },
                      assert(t:confirm(key(), A, 0)))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 0 },
                      assert(t:get(key())))
        end)
      end)

      it("confirm by another owner conflicts with a live pending reservation", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "conflict", owner = OWNER_A, state = "pending",
                        expires_at = T0 + 1000 },
                      assert(t:confirm(key(), B, 1)))
        end)
      end)

      it("abandon of the last hold deletes the reservation", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "abandoned" }, assert(t:abandon(key(), A, "a1")))
          assert.same({ status = "absent" }, assert(t:get(key())))
          -- The key is free for anyone now.
          assert.equal("reserved", assert(t:reserve(key(), B, "b1", 1000)).status)
        end)
      end)

      it("abandon with other holds left keeps the reservation", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          assert(t:reserve(key(), A, "a2", 1000))
          assert.same({ status = "kept" }, assert(t:abandon(key(), A, "a1")))
          assert.same({ status = "pending", owner = OWNER_A,
                        expires_at = T0 + 1000, holds = { "a2" } },
                      assert(t:get(key())))
        end)
      end)

      it("abandon never deletes a confirmed reservation", function()
        go(function()
          assert(t:reserve(key(), A, "a1", 1000))
          assert(t:confirm(key(), A, 2))
          assert.same({ status = "kept" }, assert(t:abandon(key(), A, "a1")))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 2 },
                      assert(t:get(key())))
        end)
      end)

      it("abandon without a reservation of this owner is absent", function()
        go(function()
          assert.same({ status = "absent" }, assert(t:abandon(key(), A, "a1")))
          assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "absent" }, assert(t:abandon(key(), B, "a1")))
          assert.equal("pending", assert(t:get(key())).status)
        end)
      end)

      it("release deletes the owner's pending or confirmed reservation", function()
        go(function()
          assert(t:reserve(key("p"), A, "a1", 1000))
          assert.same({ status = "released" }, assert(t:release(key("p"), A)))
          assert.same({ status = "absent" }, assert(t:get(key("p"))))

          assert(t:confirm(key("c"), A, 4))
          assert.same({ status = "released" }, assert(t:release(key("c"), A)))
          assert.same({ status = "absent" }, assert(t:get(key("c"))))
        end)
      end)

      it("release of a key not held by the owner is absent and changes nothing", function()
        go(function()
          assert.same({ status = "absent" }, assert(t:release(key(), A)))
          assert(t:confirm(key(), A, 4))
          assert.same({ status = "absent" }, assert(t:release(key(), B)))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 4 },
                      assert(t:get(key())))
        end)
      end)

      it("get tells pending, expired, confirmed and absent apart", function()
        go(function()
          assert.same({ status = "absent" }, assert(t:get(key())))
          assert(t:reserve(key(), A, "a1", 1000))
          assert.same({ status = "pending", owner = OWNER_A,
                        expires_at = T0 + 1000, holds = { "a1" } },
                      assert(t:get(key())))
          store:set_time(T0 + 1000)
          assert.same({ status = "expired", owner = OWNER_A,
                        expires_at = T0 + 1000, holds = { "a1" } },
                      assert(t:get(key())))
          assert(t:confirm(key(), A, 8))
          assert.same({ status = "confirmed", owner = OWNER_A, version = 8 },
                      assert(t:get(key())))
        end)
      end)

      it("keys of different tenants and namespaces are distinct", function()
        go(function()
          assert(t:reserve(key("x", "t1"), A, "a1", 1000))
          assert.equal("reserved", assert(t:reserve(key("x", "t2"), B, "b1", 1000)).status)
          assert.equal("reserved", assert(t:reserve(
            { namespace = "slug", key = "x", tenant = "t1" }, B, "b1", 1000)).status)
          assert.equal("conflict", assert(t:reserve(key("x", "t1"), B, "b1", 1000)).status)
        end)
      end)

      it("the owner's tenant may differ from the key's and is kept", function()
        go(function()
          local owner = { tenant = "t9", id = "user-a" }
          local r = assert(t:reserve(key("g"), owner, "a1", 1000))
          assert.same({ tenant = "t9", id = "user-a" }, r.owner)
          -- Same id, other tenant: another owner.
          assert.equal("conflict", assert(t:reserve(key("g"), A, "a1", 1000)).status)
        end)
      end)

      it("types of one store are separate", function()
        go(function()
          local other = assert(store:type(helpers.fresh_context(), "order"))
          assert(t:reserve(key(), A, "a1", 1000))
          assert.equal("reserved", assert(other:reserve(key(), B, "b1", 1000)).status)
        end)
      end)

      it("a closed store answers closed", function()
        store:close()
        local r, err = go(function() return t:get(key()) end)
        assert.is_nil(r)
        assert.matches("^closed", err)
      end)
    end)
  end
  if backend.dir then
    describe("the file store's directory", function()
      teardown(function() helpers.remove_dir(backend.dir) end)
      it("held the rules' types", function()
        local f = assert(io.open(backend.dir .. "/data.mdb", "rb"))
        f:close()
      end)
    end)
  end
end

-- Several keys at once from Lua: t:reserve_all, t:confirm_all,
-- t:abandon_all (docs/design.md section 5, "Several keys at once"; the Lua
-- side in lua/resv/all.lua). Every store, blocking and spawned; the
-- strings of keys built in the call or computed by __index, with a busy
-- collector and the JIT on, reach C intact.
local resv = require "resv"
local helpers = require "spec.helpers"

local format = string.format

local backends = helpers.backends { file = true }
teardown(function() helpers.remove_backends(backends) end)

local A, B = { id = "A" }, { id = "B" }
local function key(k, ns) return { namespace = ns or "n", key = k } end

-- A table whose fields exist only through __index: each read first runs a
-- full collection and makes garbage of the sizes just freed, then makes
-- its string anew from numbers (nothing else references it). A binding
-- that kept an earlier field's string only as a pointer in a struct would
-- hand C freed, overwritten bytes.
local function computed(fields)
  return setmetatable({}, {
    __index = function(_, name)
      local make = fields[name]
      if make == nil then return nil end
      collectgarbage()
      for i = 1, 8 do local _ = format("XXXX%04dXXX", i) end
      return make()
    end,
  })
end

local function computed_key(prefix, i)
  return computed { namespace = function() return "n" end,
                    key = function() return format("%s-%d", prefix, i) end }
end

for _, backend in ipairs(backends) do
  for _, mode in ipairs(helpers.modes) do
    describe("reserve_all on " .. backend.name .. " (" .. mode .. ")", function()
      local store, t
      before_each(function() store, t = helpers.fresh_type(backend) end)
      after_each(function() store:close() end)
      local function run(fn) return helpers.in_mode(mode, fn) end

      it("holds every key for the owner, each key answering as reserve does", function()
        local keys = { key("ann@x", "email"), key("ann", "username") }
        local r = assert(run(function() return t:reserve_all(keys, A, "a1", 1000) end))
        local held = { status = "reserved", owner = { tenant = "", id = "A" },
                       expires_at = helpers.T0 + 1000, holds = { "a1" } }
        assert.same({ status = "reserved", keys = { held, held } }, r)
        assert.equal("pending", assert(t:get(key("ann", "username"))).status)
        -- again by the same attempt: the same answer
        assert.same(r, assert(run(function() return t:reserve_all(keys, A, "a1", 1000) end)))
      end)

      it("answers conflict naming the holder, and leaves none of its holds", function()
        assert(t:reserve(key("ann"), B, "b1", 5000))
        local keys = { key("ann@x"), key("ann"), key("ann.b") }
        local r = assert(run(function() return t:reserve_all(keys, A, "a1", 1000) end))
        assert.same({ status = "conflict", keys = {
          { status = "abandoned" },
          { status = "conflict", owner = { tenant = "", id = "B" }, state = "pending",
            expires_at = helpers.T0 + 5000 },
          { status = "abandoned" },
        } }, r)
        assert.equal("absent", assert(t:get(key("ann@x"))).status)
        assert.equal("absent", assert(t:get(key("ann.b"))).status)
        assert.same({ "b1" }, assert(t:get(key("ann"))).holds)
      end)

      it("confirms each key, and says which one another owner holds", function()
        local keys = { key("e"), key("u") }
        assert(t:reserve_all(keys, A, "a1", 1000))
        local r = assert(run(function() return t:confirm_all(keys, A, 1) end))
        local mine = { status = "confirmed", owner = { tenant = "", id = "A" }, version = 1 }
        assert.same({ status = "confirmed", keys = { mine, mine } }, r)
        r = assert(run(function() return t:confirm_all({ key("e"), key("v") }, B, 2) end))
        assert.equal("conflict", r.status)
        assert.same({ status = "conflict", owner = { tenant = "", id = "A" },
                      state = "confirmed", version = 1 }, r.keys[1])
        assert.same({ status = "confirmed", owner = { tenant = "", id = "B" }, version = 2 },
                    r.keys[2])
        -- reserve_all counts the owner's confirmed keys as held
        r = assert(t:reserve_all({ key("e"), key("w") }, A, "a2", 1000))
        assert.equal("reserved", r.status)
        assert.same(mine, r.keys[1])
      end)

      it("abandons each key: abandoned, kept or absent", function()
        assert(t:reserve(key("one"), A, "a1", 1000))
        assert(t:reserve(key("two"), A, "a1", 1000))
        assert(t:reserve(key("two"), A, "a0", 1000))
        local r = assert(run(function()
          return t:abandon_all({ key("one"), key("two"), key("none") }, A, "a1")
        end))
        assert.same({ status = "abandoned", keys = {
          { status = "abandoned" }, { status = "kept" }, { status = "absent" } } }, r)
      end)

      it("refuses an empty list, a repeated key, too many keys and bad fields", function()
        local _, err = t:reserve_all({}, A, "a", 1000)
        assert.matches("^invalid: ", err)
        _, err = t:reserve_all({ key("x"), key("y"), key("x") }, A, "a", 1000)
        assert.matches("^invalid: ", err)
        local many = {}
        for i = 1, 17 do many[i] = key("k" .. i) end
        _, err = t:confirm_all(many, A, 1)
        assert.matches("^invalid: ", err)
        _, err = t:abandon_all({ key("x"), { namespace = "n" } }, A, "a")
        assert.equal("invalid: keys[2]: key.key: expected a string, got nil", err)
        _, err = t:reserve_all({ key("x"), "y" }, A, "a", 1000)
        assert.equal("invalid: keys[2]: key: expected a table, got string", err)
        _, err = t:reserve_all("x", A, "a", 1000)
        assert.matches("^invalid: keys: expected an array", err)
        _, err = t:reserve_all({ key("x") }, A, "a", 0)
        assert.matches("^invalid: ttl_ms", err)
        _, err = t:reserve_all({ key("x") }, { tenant = 1, id = "A" }, "a", 1000)
        assert.matches("^invalid: owner.tenant", err)
        _, err = t:confirm_all({ key("x") }, A, -1)
        assert.matches("^invalid: version", err)
        _, err = t:abandon_all({ key("x") }, A, nil)
        assert.matches("^invalid: attempt", err)
        _, err = t:reserve_all({ key("x") }, A, "a", 1000, { nope = 1 })
        assert.matches("^invalid: unknown call option nope", err)
        assert.equal("absent", assert(t:get(key("x"))).status) -- nothing written
        assert.has_error(function() t.reserve_all({}, { key("x") }, A, "a", 1000) end)
      end)

      it("answers into the caller's table, its keys' tables reused", function()
        local into = {}
        local r = assert(t:reserve_all({ key("p"), key("q") }, A, "a", 1000, { into = into }))
        assert.equal(into, r)
        local first = into.keys[1]
        r = assert(t:abandon_all({ key("p") }, A, "a", { into = into }))
        assert.equal(into, r)
        assert.equal(first, r.keys[1])
        assert.same({ status = "abandoned", keys = { { status = "abandoned" } } }, r)
      end)

      -- reserve_all of `n` keys (2: an inline store's locals; 3: a
      -- request table), keys and owners built in the call or computed, JIT
      -- on, collector busy: each key reaches C as given.
      local function reserves_under_a_busy_collector(n)
        jit.on()
        local pause = collectgarbage("setpause", 100)
        local stepmul = collectgarbage("setstepmul", 400)
        local wrong = {}
        local names = { "c", "d", "e" }
        run(function()
          for i = 1, 60 do
            local keys = { computed_key("c", i), computed_key("d", i),
                           { namespace = "n", key = format("e-%d", i) } }
            keys[n + 1] = nil
            local owner = computed { id = function() return format("user-%d", i % 7) end }
            local r, err = t:reserve_all(keys, owner, format("try-%d", i), 60000)
            if not r or r.status ~= "reserved" or r.keys[2].owner.id ~= "user-" .. (i % 7) then
              wrong[#wrong + 1] = tostring(err or r.status)
            end
          end
        end)
        collectgarbage("setpause", pause)
        collectgarbage("setstepmul", stepmul)
        assert.same({}, wrong)
        for i = 1, 60 do
          for j = 1, n do
            local k = names[j] .. "-" .. i
            local r = assert(t:get(key(k)))
            assert.equal("pending", r.status, k)
            assert.equal("user-" .. (i % 7), r.owner.id, k)
            assert.same({ "try-" .. i }, r.holds, k)
          end
        end
      end

      it("takes 3 keys and owners built in the call, or computed, JIT on, collector busy",
         function() reserves_under_a_busy_collector(3) end)

      it("takes 2 keys and owners built in the call, or computed, JIT on, collector busy",
         function() reserves_under_a_busy_collector(2) end)

      it("counts the calls in stats", function()
        assert(t:reserve_all({ key("s1"), key("s2") }, A, "a", 1000))
        assert(t:abandon_all({ key("s1"), key("s2") }, A, "a"))
        local st = assert(store:stats())
        assert.equal(1, st.calls.reserve_all.reserved)
        assert.equal(1, st.calls.abandon_all.abandoned)
        assert.truthy(require("resv.metrics").render(store):find(
          'resv_calls_total{op="reserve_all",status="reserved"} 1', 1, true))
      end)
    end)
  end
end

describe("reserve_all", function()
  it("is a method of every type", function()
    local store = assert(resv.open {})
    local t = assert(store:type("c", "a"))
    assert.is_function(t.reserve_all)
    assert.is_function(t.confirm_all)
    assert.is_function(t.abandon_all)
    store:close()
  end)
end)

-- The strings of a key, owner and attempt reach C intact whatever the JIT
-- compiler and the collector do (docs/design.md section 9; issue 11, finding 1).
--
-- Each call below passes strings nothing else references: temporaries
-- built in the call itself, or fields computed by __index on every read.
-- A binding that stores bare pointers to them in a struct lets the
-- collector free them before C copies them: the store then receives
-- garbage bytes ("contains a NUL byte"), or another caller's key. Every
-- answer is checked, then every key is read back by get.
local resv = require "resv"
local helpers = require "spec.helpers"

local format = string.format

-- A table whose fields exist only through __index: each read builds a new
-- string, and counts the reads. With `collect`, a read first runs a full
-- collection and then allocates strings of the sizes just freed, as a busy
-- program's computed field may: whatever the binding no longer references
-- is then freed and its memory overwritten.
local function computed(fields, reads, collect)
  return setmetatable({}, {
    __index = function(_, name)
      local make = fields[name]
      if make == nil then return nil end
      reads[name] = (reads[name] or 0) + 1
      if collect then
        collectgarbage()
        for i = 1, 8 do local _ = format("XXXX%04dXXXXX", i) end
      end
      return make()
    end,
  })
end

-- Runs body(worker) in `workers` coroutines (spawned) or one after the
-- other (blocking).
local function run_workers(mode, workers, body)
  if mode == "blocking" then
    for w = 1, workers do body(w) end
    return
  end
  for w = 1, workers do
    resv.spawn(body, w)
  end
  local ok, failures = resv.run()
  assert(ok, failures and table.concat(failures, "\n"))
end

-- Every key k of keys must be held, pending, by owner id owners[k].
local function assert_held(t, keys)
  for k, owner_id in pairs(keys) do
    local r, err = t:get({ namespace = "n", key = k })
    assert(r, err)
    assert.equal("pending", r.status, "get " .. k)
    assert.equal(owner_id, r.owner.id, "owner of " .. k)
  end
end

for _, backend in ipairs(helpers.backends()) do
  for _, mode in ipairs(helpers.modes) do
    describe("strings reach " .. backend.name .. " intact (" .. mode .. ")", function()
      local pause, stepmul
      before_each(function()
        jit.on()
        pause = collectgarbage("setpause", 100)
        stepmul = collectgarbage("setstepmul", 400)
      end)
      after_each(function()
        collectgarbage("setpause", pause)
        collectgarbage("setstepmul", stepmul)
      end)

      it("takes keys, owners and attempts built in the call, JIT on", function()
        local _, t = helpers.fresh_type(backend)
        local workers, calls = 50, 60
        local wrong, keys = {}, {}
        run_workers(mode, workers, function(w)
          for k = 1, calls do
            local r, err = t:reserve({ namespace = "n", key = format("key-%d-%d", w, k) },
                                     { tenant = "t" .. (w % 3), id = format("user-%d", w) },
                                     format("attempt-%d-%d", w, k), 60000)
            if not (r and r.status == "reserved" and r.owner.id == "user-" .. w
                    and r.holds[1] == format("attempt-%d-%d", w, k)) then
              wrong[#wrong + 1] = format("%d/%d: %s", w, k, r and r.status or err)
            end
            keys[format("key-%d-%d", w, k)] = "user-" .. w
          end
        end)
        assert.same({}, wrong)
        assert_held(t, keys)
      end)

      it("reads each computed field once, under a busy collector", function()
        local _, t = helpers.fresh_type(backend)
        local n = mode == "blocking" and 500 or 10
        local workers = mode == "blocking" and 1 or 50
        local wrong, keys, reads = {}, {}, {}
        run_workers(mode, workers, function(w)
          for i = 1, n do
            local id = format("%d-%d", w, i)
            local key_reads, owner_reads = {}, {}
            local key = computed({
              tenant = function() return "" .. "" end,
              namespace = function() return ("n"):rep(1) end,
              key = function() return "key-" .. id end,
            }, key_reads)
            local owner = computed({
              tenant = function() return ("t"):rep(1) end,
              id = function() return "owner-" .. id end,
            }, owner_reads, true)
            local r, err = t:reserve(key, owner, "attempt-" .. id, 60000)
            if not (r and r.status == "reserved" and r.owner.id == "owner-" .. id
                    and r.owner.tenant == "t") then
              wrong[#wrong + 1] = id .. ": " .. tostring(r and r.status or err)
            end
            keys["key-" .. id] = "owner-" .. id
            reads[#reads + 1] = { key_reads.tenant, key_reads.namespace, key_reads.key,
                                  owner_reads.tenant, owner_reads.id }
          end
        end)
        assert.same({}, wrong)
        for i = 1, #reads do
          assert.same({ 1, 1, 1, 1, 1 }, reads[i])
        end
        assert_held(t, keys)
      end)

      it("answers the owner it reserved for, whatever a second read would give", function()
        local _, t = helpers.fresh_type(backend)
        local seen = 0
        local owner = setmetatable({}, { __index = function(_, name)
          if name ~= "id" then return nil end
          seen = seen + 1
          return "owner-" .. seen
        end })
        local r = helpers.in_mode(mode, function()
          return assert(t:reserve({ namespace = "n", key = "k" }, owner, "a", 60000))
        end)
        assert.equal("reserved", r.status)
        local held = assert(t:get({ namespace = "n", key = "k" }))
        assert.equal(held.owner.id, r.owner.id)
        r = helpers.in_mode(mode, function()
          return assert(t:confirm({ namespace = "n", key = "k" }, { id = held.owner.id }, 1))
        end)
        assert.equal(held.owner.id, r.owner.id)
      end)
    end)
  end
end

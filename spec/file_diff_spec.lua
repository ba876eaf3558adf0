-- The file store answers as the memory store does, through the Lua API
-- (docs/design.md section 6): random sequences of calls (keys in two tenants, owners
-- sharing an id across tenants, attempts, versions, ttls at the edges, the
-- clock jumping onto and around expiry instants, now and then back) run on
-- both side by side with the same clock, and every answer or error must be
-- the same, holds compared as sets. 4 seeds x 2,500 calls = 10,000 calls.
-- The file store's grace is past the run (the memory store keeps expired
-- reservations; past the grace expired and absent mean the same).
local resv = require "resv"
local helpers = require "spec.helpers"

local KEY_TENANTS = { "", "t1" }
local KEYS = { "ann", "$cat", string.rep("L", 600) } -- the last is hashed on disk
local NAMESPACES = { "email", "slug" }
local OWNERS = { { tenant = "", id = "u0" }, { tenant = "t1", id = "u0" },
                 { tenant = "", id = "u1" } }
local ATTEMPTS = { "a0", "a1", "a2", "$a3" }
local TTLS = { 1, 2, 10, 100, 1000 }
local JUMPS = { 0, 1, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 1001 }
local OPS = { "reserve", "reserve", "reserve", "reserve", "reserve", "reserve",
              "confirm", "abandon", "abandon", "abandon", "abandon", "release",
              "release", "get", "get" }

-- A small deterministic generator (Park-Miller), so a seed replays.
local function generator(seed)
  local state = seed
  return function(n)
    state = (state * 16807) % 2147483647
    return state % n + 1
  end
end

-- An answer as a comparable string: holds sorted, every field named.
local function canon(r, err)
  if not r then return "error " .. tostring(err):match("^(%a+)") end
  local holds = {}
  for i, h in ipairs(r.holds or {}) do holds[i] = h end
  table.sort(holds)
  return string.format("%s state=%s owner=%s/%s expires_at=%s version=%s holds=[%s]",
                       r.status, tostring(r.state),
                       r.owner and r.owner.tenant or "-", r.owner and r.owner.id or "-",
                       tostring(r.expires_at), tostring(r.version),
                       table.concat(holds, ","))
end

local function call(t, op, key, owner, attempt, ttl, version)
  if op == "reserve" then return t:reserve(key, owner, attempt, ttl) end
  if op == "confirm" then return t:confirm(key, owner, version) end
  if op == "abandon" then return t:abandon(key, owner, attempt) end
  if op == "release" then return t:release(key, owner) end
  return t:get(key)
end

describe("the file store against the memory store", function()
  for _, seed in ipairs({ 11, 12, 13, 20240611 }) do
    it("answers seed " .. seed .. " as the memory store, call by call", function()
      local dir = helpers.fresh_dir()
      local memory = assert(resv.open {})
      local file = assert(resv.open { path = dir, sweep_grace_ms = 2 ^ 50 })
      local tm = assert(memory:type(helpers.fresh_context(), "diff"))
      local tf = assert(file:type(helpers.fresh_context(), "diff"))
      local pick = generator(seed)
      local now, last_expiry = helpers.T0, nil
      local seen = {}
      for step = 1, 2500 do
        local roll = pick(100)
        if roll <= 25 then
          now = now + JUMPS[pick(#JUMPS)]
        elseif roll <= 27 then
          now = now - JUMPS[pick(#JUMPS)]
        elseif roll <= 40 and last_expiry then
          now = last_expiry + pick(3) - 2
        end
        memory:set_time(now)
        file:set_time(now)
        local op = OPS[pick(#OPS)]
        local key = { tenant = KEY_TENANTS[pick(2)],
                      namespace = NAMESPACES[pick(8) == 1 and 2 or 1],
                      key = KEYS[pick(#KEYS)] }
        local owner = OWNERS[pick(3)]
        local attempt, ttl, version = ATTEMPTS[pick(4)], TTLS[pick(#TTLS)], pick(6) - 1
        local rm, em = call(tm, op, key, owner, attempt, ttl, version)
        local rf, ef = call(tf, op, key, owner, attempt, ttl, version)
        local want, got = canon(rm, em), canon(rf, ef)
        if want ~= got then
          error(string.format("seed %d step %d (now %d): %s %s/%s/%s owner %s/%s "
                              .. "attempt %s ttl %d version %d:\n  memory: %s\n  file:   %s",
                              seed, step, now, op, key.tenant, key.namespace,
                              key.key:sub(1, 20), owner.tenant, owner.id, attempt, ttl,
                              version, want, got))
        end
        if rm then
          seen[rm.status] = true
          if rm.status == "reserved" then last_expiry = rm.expires_at end
        end
      end
      -- Not a dull run: the interesting answers all came up.
      for _, status in ipairs({ "reserved", "confirmed", "conflict", "kept", "abandoned" }) do
        assert.is_true(seen[status] == true, status .. " never answered")
      end
      memory:close()
      file:close()
      file, tf = nil, nil
      collectgarbage()
      collectgarbage()
      helpers.remove_dir(dir)
    end)
  end
end)

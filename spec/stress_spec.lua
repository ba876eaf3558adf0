-- Coroutines on few keys (issue 8): spawned coroutines call reserve,
-- confirm, abandon, release and get at random on three keys while one
-- coroutine moves the store's frozen clock forward in jumps. Two
-- coroutines share each owner. After every answer the ledger of what
-- earlier answers proved is checked (see csrc/test/test_stress.c, the
-- threaded twin):
--   * one owner: reserved/confirmed for o while another owner has a live
--     claim (confirmed, or pending past the clock) is a violation, unless
--     a release of o overlapped the call;
--   * a confirmed reservation is never lost: while o's confirmed claim
--     stands, an abandon by o answers kept, a get shows it as o's;
--   * holds are never lost: our own live hold shows in get and reserve.
-- On memory, MongoDB and the file store (sync "process" and "disk").
-- RESV_STRESS_MS sets each run's length (default 1500 ms).
local resv = require "resv"
local helpers = require "spec.helpers"

local RUN_MS = tonumber(os.getenv("RESV_STRESS_MS")) or 1500
local COROUTINES = 8
local KEYS = { "k1", "k2", "k3" }

local function run(backend)
  local store, t = helpers.fresh_type(backend, { threads = 4 })
  local ledger = {}          -- key -> owner -> claim
  local violations = {}
  local counts = { calls = 0 }
  local seq = 0
  local stop = false

  local function claims(key)
    ledger[key] = ledger[key] or {}
    return ledger[key]
  end
  local function claim(key, owner)
    local c = claims(key)
    c[owner] = c[owner] or { releases = 0, epoch = 0, holds = {} }
    return c[owner]
  end
  local function bad(msg)
    if #violations < 10 then violations[#violations + 1] = msg end
  end
  local function live_other(key, owner, now)
    for other, c in pairs(claims(key)) do
      if other ~= owner then
        if c.confirmed then return other .. " (confirmed)" end
        for attempt, h in pairs(c.holds) do
          if h.expires > now then return other .. " (hold " .. attempt .. ")" end
        end
      end
    end
  end

  local function worker(n)
    local owner_id = "o" .. math.floor(n / 2)
    local owner = { id = owner_id }
    while not stop do
      local key_name = KEYS[math.random(#KEYS)]
      local key = { namespace = "email", key = key_name }
      local attempt = "c" .. n .. "a" .. math.random(0, 2)
      local dice = math.random(100)
      local op = dice <= 35 and "reserve" or dice <= 50 and "confirm"
                 or dice <= 75 and "abandon" or dice <= 80 and "release" or "get"
      local me = claim(key_name, owner_id)
      seq = seq + 1
      local start = seq
      local idle, epoch = me.releases == 0, me.epoch
      local was_confirmed, confirmed_seq = me.confirmed, me.confirmed_seq
      if op == "release" then
        me.releases = me.releases + 1
        me.epoch = me.epoch + 1
        me.confirmed = nil
        me.holds = {}
      elseif op == "abandon" or op == "confirm" then
        me.holds[attempt] = nil
      end
      local r, err
      if op == "reserve" then r, err = t:reserve(key, owner, attempt, math.random(20, 200))
      elseif op == "confirm" then r, err = t:confirm(key, owner, math.random(0, 99))
      elseif op == "abandon" then r, err = t:abandon(key, owner, attempt)
      elseif op == "release" then r, err = t:release(key, owner)
      else r, err = t:get(key) end
      counts.calls = counts.calls + 1
      seq = seq + 1
      local done = seq
      local now = store:now()
      if op == "release" then
        me.releases = me.releases - 1
        me.epoch = me.epoch + 1
      end
      local unreleased = idle and me.epoch == epoch
      local stood = was_confirmed and unreleased and confirmed_seq < start
      if not r then
        bad(op .. ": " .. tostring(err))
      else
        counts[r.status] = (counts[r.status] or 0) + 1
        local holder = r.owner and r.owner.id
        if r.status == "reserved" then
          local other = unreleased and r.expires_at > now and live_other(key_name, owner_id, now)
          if other then bad("reserved " .. key_name .. " for " .. owner_id .. " while " .. other .. " holds it") end
          if stood then bad("reserved, but " .. owner_id .. " had it confirmed") end
          if unreleased then me.holds[attempt] = { expires = r.expires_at, seq = done } end
        elseif r.status == "confirmed" and op ~= "get" then
          local other = unreleased and live_other(key_name, owner_id, now)
          if other then bad("confirmed " .. key_name .. " for " .. owner_id .. " while " .. other .. " holds it") end
          if holder ~= owner_id then bad("confirmed for another owner") end
          if unreleased then
            me.confirmed, me.confirmed_seq = true, done
          end
          me.holds = {}
        elseif r.status == "confirmed" then
          if stood and holder ~= owner_id then bad("get: " .. owner_id .. "'s confirmed one lost") end
        elseif r.status == "conflict" or r.status == "abandoned" or r.status == "absent" then
          if stood then bad(op .. " " .. r.status .. ", but " .. owner_id .. " had it confirmed") end
        elseif r.status == "pending" or r.status == "expired" then
          if stood then bad("get: pending, but " .. owner_id .. " had it confirmed") end
          if holder == owner_id then
            for a, h in pairs(me.holds) do
              if h.seq < start and h.expires > now then
                local found = false
                for _, x in ipairs(r.holds or {}) do found = found or x == a end
                if not found then bad("get: hold " .. a .. " lost") end
              end
            end
          end
        end
      end
      -- A call that answered on this thread yielded nothing: let the others run.
      if not backend.options.uri then coroutine.yield() end
    end
  end

  for n = 0, COROUTINES - 1 do resv.spawn(worker, n) end
  resv.spawn(function()
    local elapsed = 0
    while elapsed < RUN_MS do
      local jump = math.random(4) == 1 and math.random(0, 150) or 1
      store:set_time(store:now() + jump)
      helpers.sleep_ms(2)
      elapsed = elapsed + 2
      coroutine.yield()
    end
    stop = true
  end)
  local ok, failures = resv.run()
  assert(ok, failures and table.concat(failures, "\n"))
  local summary = {}
  for k, v in pairs(counts) do summary[#summary + 1] = k .. " " .. v end
  table.sort(summary)
  io.stderr:write(("stress (Lua, %s, %d coroutines, %d ms): %s\n"):format(
    backend.name, COROUTINES, RUN_MS, table.concat(summary, ", ")))
  store:close()
  return violations, counts
end

local backends = helpers.backends({ file = true })
teardown(function() helpers.remove_backends(backends) end)

for _, backend in ipairs(backends) do
  describe("coroutines on few keys on " .. backend.name, function()
    it("keep one owner per key, confirmed reservations and holds", function()
      local violations, counts = run(backend)
      assert.same({}, violations)
      assert.is_true((counts.reserved or 0) > 0)
      assert.is_true((counts.conflict or 0) > 0)
    end)
  end)
end

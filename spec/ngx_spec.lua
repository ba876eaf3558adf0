-- The OpenResty waiter, driven by a fake `ngx` (a real nginx is tested by
-- the gateway's own suite): calls in a yieldable phase wait with ngx.sleep,
-- elsewhere they block.
local helpers = require "spec.helpers"
local ngxwait = require "resv.ngx"

local KEY = { namespace = "n", key = "k" }
local OWNER = { id = "o" }

local function fake_ngx(phase, sleeps)
  return {
    get_phase = function() return phase end,
    sleep = function(s)
      sleeps[#sleeps + 1] = s
      helpers.sleep_ms(math.ceil(s * 1000))
    end,
  }
end

describe("resv.ngx", function()
  after_each(function() ngxwait._use(nil) end)

  it("is not usable outside nginx", function()
    assert.is_false(ngxwait.usable())
  end)

  it("is usable only in phases that may yield", function()
    for _, phase in ipairs { "rewrite", "access", "content", "timer", "ssl_cert" } do
      ngxwait._use(fake_ngx(phase, {}))
      assert.is_true(ngxwait.usable(), phase)
    end
    for _, phase in ipairs { "init", "init_worker", "set", "header_filter",
                             "body_filter", "log", "balancer" } do
      ngxwait._use(fake_ngx(phase, {}))
      assert.is_false(ngxwait.usable(), phase)
    end
  end)

  for _, backend in ipairs(helpers.backends()) do
    it("answers through ngx.sleep on " .. backend.name, function()
      local sleeps = {}
      local store, t = helpers.fresh_type(backend)
      ngxwait._use(fake_ngx("content", sleeps))
      local r = assert(t:reserve(KEY, OWNER, "a", 1000))
      assert.same({ status = "reserved", owner = { tenant = "", id = "o" },
                    expires_at = helpers.T0 + 1000, holds = { "a" } }, r)
      assert.same({ status = "conflict", owner = { tenant = "", id = "o" },
                    state = "pending", expires_at = helpers.T0 + 1000 },
                  assert(t:reserve(KEY, { id = "p" }, "b", 1000)))
      if backend.name == "memory" then
        assert.same({}, sleeps) -- answered at once, never slept
      end
      -- Each wait backs off from 1 ms, doubling up to 10 ms.
      local steps = { 0.001, 0.002, 0.004, 0.008, 0.01 }
      local step = 1
      for i, s in ipairs(sleeps) do
        if s == 0.001 then step = 1 end -- the next call's wait
        assert.equal(steps[math.min(step, #steps)], s, "sleep " .. i)
        step = step + 1
      end
      store:close()
    end)

    it("blocks in a phase that cannot yield on " .. backend.name, function()
      local sleeps = {}
      local store, t = helpers.fresh_type(backend)
      ngxwait._use(fake_ngx("init_worker", sleeps))
      assert.equal("reserved", assert(t:reserve(KEY, OWNER, "a", 1000)).status)
      assert.same({}, sleeps)
      store:close()
    end)
  end
end)

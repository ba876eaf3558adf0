-- store:stats() and resv.metrics(store) (docs/design.md section 13): the counts of
-- a known sequence of calls, a cumulative histogram whose +Inf bucket is
-- the op's count, entries and bytes of the embedded stores, and the text
-- format (HELP/TYPE lines, labels, escaping, +Inf).
local resv = require "resv"
local helpers = require "spec.helpers"

local KEY = { namespace = "email", key = "ann@example.com" }

local BACKENDS = helpers.backends { file = true }
-- The file stores' directories go after the file's last test.
teardown(function() helpers.remove_backends(BACKENDS) end)

for _, backend in ipairs(BACKENDS) do
  -- Stores whose calls from a host that must not block, Lua's here, are
  -- timed one in 256 (the histogram's count: those timed).
  local sampled = backend.name == "memory" or backend.name == "file (sync process)"
  describe("stats of the " .. backend.name .. " store", function()
    local store, t

    before_each(function()
      store, t = helpers.fresh_type(backend, { slow_ms = 5000 })
    end)

    after_each(function()
      store:close()
    end)

    it("counts each call once by status and by error code", function()
      assert(t:reserve(KEY, { id = "a" }, "x", 60000))
      assert(t:reserve(KEY, { id = "b" }, "y", 60000)) -- conflict
      assert(t:get(KEY))
      assert.is_nil(t:get({ namespace = "", key = "k" })) -- invalid
      assert(t:sweep())
      local s = assert(store:stats())
      assert.same({ reserved = 1, conflict = 1 }, s.calls.reserve)
      assert.same({ pending = 1 }, s.calls.get)
      assert.same({ invalid = 1 }, s.errors.get)
      assert.same({ swept = 1 }, s.calls.sweep)
      assert.same({}, s.calls.abandon)
      assert.equal(5000, s.slow_ms)
      assert.equal(0, s.slow_calls)
      for _, op in ipairs({ "reserve", "get", "sweep", "confirm" }) do
        local h = s.latency[op]
        local last = h.buckets[#h.buckets]
        assert.equal(math.huge, last.le)
        assert.equal(h.count, last.count)
        for i = 2, #h.buckets do
          assert.is_true(h.buckets[i].count >= h.buckets[i - 1].count)
          assert.is_true(h.buckets[i].le > h.buckets[i - 1].le)
        end
      end
      if sampled then -- one call in 256 is timed
        assert.is_true(s.latency.reserve.count <= 2)
      else
        assert.equal(2, s.latency.reserve.count)
        assert.equal(2, s.latency.get.count)
      end
      if backend.name == "mongodb" then
        assert.is_nil(s.entries)
        assert.equal(1, s.duplicate_key_retries)
      else
        assert.equal(1, s.entries)
        assert.is_true(s.bytes > 0)
      end
    end)

    it("reports the server's clock against this host's (MongoDB only)", function()
      assert(t:reserve(KEY, { id = "a" }, "x", 60000))
      local s = assert(store:stats())
      if backend.name ~= "mongodb" then
        assert.is_nil(s.clock_skew_ms)
        assert.is_nil(s.clock_skew_error_ms)
        assert.not_matches("resv_clock_skew", assert(resv.metrics(store)), 1, true)
        return
      end
      for _ = 1, 50 do -- the monitor's first hello may still be on its way
        if s.clock_skew_ms then break end
        os.execute("sleep 0.1")
        s = assert(store:stats())
      end
      assert.is_true(s.clock_skew_error_ms >= 0)
      assert.is_true(math.abs(s.clock_skew_ms) <= s.clock_skew_error_ms + 1000, s.clock_skew_ms)
      local text = assert(resv.metrics(store))
      assert.matches('# TYPE resv_clock_skew_seconds gauge\nresv_clock_skew_seconds %-?[%d%.e%-]+\n',
                     text)
      assert.matches('\nresv_clock_skew_error_seconds [%d%.e%-]+\n', text)
    end)

    it("renders the Prometheus text format", function()
      assert(t:reserve(KEY, { id = "a" }, "x", 60000))
      local text = assert(resv.metrics(store, { worker = 'w"1' }))
      assert.matches('# TYPE resv_calls_total counter\n', text, 1, true)
      assert.matches('resv_calls_total{worker="w\\"1",op="reserve",status="reserved"} 1\n',
                     text, 1, true)
      assert.matches('# TYPE resv_call_duration_seconds histogram\n', text, 1, true)
      local timed = sampled and "%d" or "1"
      assert.matches('resv_call_duration_seconds_bucket{worker="w\\"1",op="reserve",le="%+Inf"} '
                     .. timed .. '\n', text)
      assert.matches('resv_call_duration_seconds_count{worker="w\\"1",op="reserve"} '
                     .. timed .. '\n', text)
      assert.matches('resv_jobs_waiting{worker="w\\"1"} 0\n', text, 1, true)
      if backend.name ~= "mongodb" then
        assert.matches('resv_entries{worker="w\\"1"} 1\n', text, 1, true)
      end
      -- Every line is a comment or "name{labels} value".
      for l in text:gmatch("[^\n]+") do
        assert.is_truthy(l:find("^# ") or l:find("^[%a_:][%w_:]*{?.-}? [%d%.e%+%-Infa]+$"), l)
      end
      assert.has_error(function() resv.metrics(store, { ["bad-name"] = 1 }) end)
    end)
  end)
end

describe("the slow_ms option", function()
  it("is checked", function()
    local s, err = resv.open { slow_ms = -1 }
    assert.is_nil(s)
    assert.matches("^invalid: slow_ms", err)
    s, err = resv.open { slow_ms = "x" }
    assert.is_nil(s)
    assert.matches("^invalid: ", err)
  end)
end)

describe("resv.metrics.render_many", function()
  it("renders several stores' stats, each family's HELP and TYPE once, through JSON", function()
    local metrics = require "resv.metrics"
    local list = {}
    for w = 0, 1 do
      local store = assert(resv.open {})
      local t = assert(store:type("shop", "user"))
      for i = 1, w + 1 do
        assert(t:reserve({ namespace = "email", key = "k" .. i }, { id = "o" }, "a", 60000))
      end
      -- What a worker would publish in an ngx.shared dict.
      local packed = metrics.portable(assert(store:stats()))
      for _, h in pairs(packed.latency) do
        for _, c in ipairs(h.buckets) do assert.is_number(c) end
      end
      list[#list + 1] = { labels = { worker = w }, stats = packed }
      store:close()
    end
    local text = metrics.render_many(list)
    local _, types = text:gsub("# TYPE resv_calls_total counter\n", "")
    assert.equal(1, types)
    assert.matches('resv_calls_total{worker="0",op="reserve",status="reserved"} 1\n', text, 1, true)
    assert.matches('resv_calls_total{worker="1",op="reserve",status="reserved"} 2\n', text, 1, true)
    assert.matches('resv_call_duration_seconds_bucket{worker="1",op="get",le="+Inf"} 0\n', text, 1, true)
    assert.matches('resv_entries{worker="1"} 2\n', text, 1, true)
    -- The samples of a family come right after its TYPE line.
    local family
    for l in text:gmatch("[^\n]+") do
      local name = l:match("^# TYPE (%S+)")
      if name then
        family = name
      elseif not l:find("^# ") then
        assert.equal(family, l:sub(1, #family), l)
      end
    end
  end)
end)

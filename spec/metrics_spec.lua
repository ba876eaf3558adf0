-- resv.metrics (lua/resv/metrics.lua): its numbers are written in the
-- shortest of 15, 16 and 17 significant digits that reads back as the
-- same double (le="1e-06", not le="9.9999999999999995e-07"), and its text
-- passes Prometheus' own checker, `promtool check metrics` (Debian package
-- prometheus), when it is installed.
local resv = require "resv"
local metrics = require "resv.metrics"
local C = require "resv.ffi"

local function promtool_path()
  local p = io.popen("command -v promtool 2>/dev/null")
  local path = p:read("*l")
  p:close()
  return path
end

-- Runs `promtool check metrics` on text: true, or false and what it said.
local function promtool_check(text)
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(text)
  f:close()
  local p = io.popen("promtool check metrics < " .. file .. " 2>&1; echo \"exit=$?\"")
  local said = p:read("*a")
  p:close()
  os.remove(file)
  local code = said:match("exit=(%d+)%s*$")
  return code == "0" and said == "exit=0\n", said
end

describe("resv.metrics numbers", function()
  it("are the shortest text that reads back as the same double", function()
    local want = {
      { 1e-06, "1e-06" }, { 2.5e-06, "2.5e-06" }, { 0.1, "0.1" }, { 0.25, "0.25" },
      { 0.005, "0.005" }, { 0.1 + 0.2, "0.30000000000000004" },
      { 1 / 3, "0.3333333333333333" }, { 42, "42" }, { 0, "0" },
      { math.huge, "+Inf" }, { -math.huge, "-Inf" },
    }
    for _, w in ipairs(want) do
      assert.equal(w[2], metrics.number(w[1]))
    end
    for _ = 1, 2000 do
      local v = (math.random() - 0.5) * 10 ^ math.random(-12, 12)
      local text = metrics.number(v)
      assert.equal(v, tonumber(text), text)
      local digits = text:gsub("^%-", ""):gsub("e.*", ""):gsub("%.", ""):gsub("^0+", "")
      assert.is_true(#digits <= 17, text)
    end
  end)

  it("write each bucket's bound as it is meant, and it reads back exactly", function()
    local store = assert(resv.open {})
    local t = assert(store:type("shop", "user"))
    assert(t:get { namespace = "email", key = "k" })
    local text = assert(resv.metrics(store))
    store:close()
    local seen = {}
    for le in text:gmatch('resv_call_duration_seconds_bucket{op="get",le="([^"]+)"}') do
      seen[#seen + 1] = le
    end
    assert.equal(C.RESV_STATS_BUCKETS, #seen)
    for i, le in ipairs(seen) do
      local bound = C.resv_stats_bound(i - 1)
      assert.equal(bound, le == "+Inf" and math.huge or tonumber(le), le)
      assert.is_nil(le:find("%d%d%d%d%d%d%d%d%d%d%d%d"), le) -- no 17-digit tails
    end
    assert.equal("1e-06", seen[1])
    assert.is_truthy(text:find('le="0.1"', 1, true))
  end)
end)

describe("resv.metrics text", function()
  local promtool = promtool_path()

  if not promtool then
    pending("passes promtool check metrics: promtool is not installed (Debian package prometheus)")
    return
  end

  it("passes promtool check metrics", function()
    local dir = os.tmpname()
    os.remove(dir)
    local stores = {
      assert(resv.open {}),
      assert(resv.open { path = dir }),
    }
    local list = {}
    for i, store in ipairs(stores) do
      local t = assert(store:type("shop", "user"))
      local key = { namespace = "email", key = "ann@example.com" }
      assert(t:reserve(key, { id = "a" }, "x", 60000))
      assert(t:reserve(key, { id = "b" }, "y", 60000)) -- conflict
      assert(t:get(key))
      assert.is_nil(t:get { namespace = "", key = "k" }) -- an error
      assert(t:sweep())
      local text = assert(resv.metrics(store, { worker = 'w"1\\\n', host = "h" }))
      local ok, said = promtool_check(text)
      assert.is_true(ok, said .. "\n" .. text)
      list[i] = { labels = { worker = i }, stats = metrics.portable(assert(store:stats())) }
    end
    local ok, said = promtool_check(metrics.render_many(list))
    assert.is_true(ok, said)
    for _, store in ipairs(stores) do store:close() end
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

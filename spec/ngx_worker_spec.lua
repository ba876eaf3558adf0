-- resv.ngx's helpers for an nginx.conf (lua/resv/ngx_worker.lua), driven by
-- a fake `ngx`: several "workers" (memory stores, each with its worker id)
-- sharing one fake lua_shared_dict. The same helpers in a real nginx with
-- several workers, a worker killed and started again, and promtool: the
-- Metrics tests of examples/openresty/test/test_gateway.py.
local resv = require "resv"
local resv_ngx = require "resv.ngx"
local worker = require "resv.ngx_worker"
local metrics = require "resv.metrics"

-- A shared dict with ttls on a clock of the test's.
local function fake_dict(clock)
  local items = {}
  return {
    set = function(_, k, v, ttl)
      items[k] = { v = v, until_ = ttl and ttl > 0 and clock.now + ttl or math.huge }
      return true
    end,
    get = function(_, k)
      local it = items[k]
      if it and it.until_ > clock.now then return it.v end
      return nil
    end,
    get_keys = function()
      local keys = {}
      for k, it in pairs(items) do
        if it.until_ > clock.now then keys[#keys + 1] = k end
      end
      return keys
    end,
  }
end

-- One fake nginx: the shared dicts, and the worker whose code runs now.
local function fake_nginx(dicts)
  local n = {
    timers = {}, logs = {}, out = {}, exited = nil, exiting = false, id = 0,
    status = 200, header = {}, HTTP_OK = 200, ERR = 4, INFO = 7, WARN = 5,
  }
  n.shared = dicts
  n.worker = {
    id = function() return n.id end,
    exiting = function() return n.exiting end,
  }
  n.timer = {
    every = function(s, fn)
      n.timers[#n.timers + 1] = { every = s, fn = fn, worker = n.id }
      return true
    end,
    at = function(s, fn)
      n.timers[#n.timers + 1] = { at = s, fn = fn, worker = n.id }
      return true
    end,
  }
  n.log = function(_, ...) n.logs[#n.logs + 1] = table.concat({ ... }) end
  n.say = function(...) n.out[#n.out + 1] = table.concat({ ... }) .. "\n" end
  n.print = function(...) n.out[#n.out + 1] = table.concat({ ... }) end
  n.exit = function(code) n.exited = code end
  n.get_phase = function() return "content" end
  return n
end

local function samples(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) ~= "#" then
      local name, value = line:match("^(.-) (%S+)$")
      out[name] = tonumber(value)
    end
  end
  return out
end

local KEY = { namespace = "n", key = "k" }

describe("resv.ngx's helpers", function()
  local clock, n, stores

  -- Runs fn as worker id (each worker has its own Lua state in nginx: a
  -- fresh module state per worker is what _use gives).
  local function as_worker(id, fn)
    n.id = id
    return fn()
  end

  before_each(function()
    clock = { now = 0 }
    n = fake_nginx({ resv_metrics = fake_dict(clock) })
    worker._use(n)
    resv_ngx._use(n)
    stores = {}
  end)

  after_each(function()
    worker._use(nil)
    resv_ngx._use(nil)
    for _, s in ipairs(stores) do s:close() end
  end)

  local function open(id)
    return as_worker(id, function()
      worker._use(n)
      local s = assert(resv_ngx.open_in_worker({ per_process = true }, { every = 1 }))
      stores[#stores + 1] = s
      return s
    end)
  end

  it("reads a publication back as the numbers it was made of", function()
    local s = assert(resv.open {})
    stores[#stores + 1] = s
    local t = assert(s:type("c", "a"))
    assert(t:reserve(KEY, { id = "o" }, "a", 1000))
    assert(t:get({ namespace = "n", key = "other" }))
    local st = assert(s:stats())
    local back = worker._decode(worker._encode(st))
    assert.equal(1, back.calls.reserve.reserved)
    assert.equal(1, back.calls.get.absent)
    assert.equal(st.entries, back.entries)
    assert.equal(metrics.render_many { { stats = st } }, metrics.render_many { { stats = back } })
    assert.is_nil(worker._decode("calls.reserve.reserved ten"))
    assert.is_nil(worker._decode("calls 1\ncalls.reserve 2"))
    assert.is_nil(worker._decode("calls 1"))
  end)

  it("serves every worker's counters, each with its worker label", function()
    local calls = { [0] = 3, [1] = 5 }
    for id = 0, 1 do
      local s = open(id)
      local t = assert(s:type("c", "a"))
      for i = 1, calls[id] do
        assert.equal("absent", assert(t:get({ namespace = "n", key = "k" .. i })).status)
      end
      -- this worker's timer publishes its counters of now
      as_worker(id, function() n.timers[#n.timers].fn(false) end)
    end
    assert.equal(2, #n.timers)
    assert.equal(1, n.timers[1].every)
    as_worker(0, function() assert.is_true(resv_ngx.serve_metrics(stores[1])) end)
    local text = table.concat(n.out)
    assert.equal("text/plain; version=0.0.4; charset=utf-8", n.header["Content-Type"])
    local got = samples(text)
    assert.equal(3, got['resv_calls_total{worker="0",op="get",status="absent"}'])
    assert.equal(5, got['resv_calls_total{worker="1",op="get",status="absent"}'])
    local sum = 0
    for name, v in pairs(got) do
      if name:find('^resv_calls_total{') and name:find('op="get"', 1, true) then sum = sum + v end
    end
    assert.equal(8, sum)
    -- one HELP and TYPE per family, however many workers
    local _, types = text:gsub("# TYPE resv_calls_total counter\n", "")
    assert.equal(1, types)
    assert.equal(metrics.render_many {
      { labels = { worker = "0" }, stats = metrics.portable(assert(stores[1]:stats())) },
      { labels = { worker = "1" }, stats = metrics.portable(assert(stores[2]:stats())) },
    }, text)
  end)

  it("lists a worker started again in place of a dead one once, with its own counters", function()
    local s0 = open(0)
    local s1 = open(1)
    local t1 = assert(s1:type("c", "a"))
    for i = 1, 4 do assert(t1:get({ namespace = "n", key = "k" .. i })) end
    as_worker(1, function() n.timers[#n.timers].fn(false) end)
    -- worker 1 dies; nginx starts another with id 1, which publishes at once
    local s1b = open(1)
    local tb = assert(s1b:type("c", "a"))
    assert(tb:get(KEY))
    as_worker(1, function() n.timers[#n.timers].fn(false) end)
    as_worker(0, function() resv_ngx.serve_metrics(s0) end)
    local text = table.concat(n.out)
    local got = samples(text)
    assert.equal(1, got['resv_calls_total{worker="1",op="get",status="absent"}'])
    assert.is_nil(got['resv_calls_total{worker="0",op="get",status="absent"}'])
    local _, listed = text:gsub('\nresv_jobs_waiting{worker="1"} ', "")
    assert.equal(1, listed)
  end)

  it("drops a worker whose publications stopped, and an exiting worker publishes no more", function()
    local s0, s1 = open(0), open(1)
    local t1 = assert(s1:type("c", "a"))
    clock.now = 4
    as_worker(0, function() n.timers[1].fn(false) end)
    -- worker 1 is exiting (a reload): its timer's last runs publish nothing
    n.exiting = true
    assert(t1:get(KEY))
    as_worker(1, function() n.timers[2].fn(false) end)
    n.exiting = false
    clock.now = 5.5 -- worker 1's publication at 0 is past its 5 s
    as_worker(0, function() resv_ngx.serve_metrics(s0) end)
    local text = table.concat(n.out)
    assert.truthy(text:find('worker="0"', 1, true))
    assert.is_nil(text:find('worker="1"', 1, true))
  end)

  it("opens the worker's store and hands out its types", function()
    local s = open(0)
    assert.equal(s, resv_ngx.store())
    local t = assert(resv_ngx.type("c", "a"))
    assert.equal(t, assert(s:type("c", "a")))
    assert.equal("reserved", assert(t:reserve(KEY, { id = "o" }, "a", 1000)).status)
    local none, err = resv_ngx.type(1, "a")
    assert.is_nil(none)
    assert.matches("^invalid: ", err)
  end)

  it("answers 503 naming why when the store did not open", function()
    local s, err = resv_ngx.open_in_worker({ uri = "not a uri" })
    assert.is_nil(s)
    assert.matches("^invalid: ", err)
    assert.matches("cannot open the store: invalid: ", n.logs[1])
    local none, why = resv_ngx.type("c", "a")
    assert.is_nil(none)
    assert.equal(err, why)
    resv_ngx.unavailable(why, "not open")
    assert.equal(503, n.status)
    assert.equal(200, n.exited)
    assert.equal("application/json", n.header["Content-Type"])
    local body = table.concat(n.out)
    assert.equal('{"error":"store unavailable","detail":"not open: '
                 .. err:gsub('"', '\\"') .. '"}\n', body)
    -- a call that failed: quotes and control characters escaped
    n.out = {}
    resv_ngx.unavailable('timeout: "x"\n')
    assert.equal('{"error":"store unavailable","detail":"timeout: \\"x\\"\\u000a"}\n',
                 table.concat(n.out))
  end)

  -- A file store in a new directory, cut short once closed: refused at open
  -- as damaged (format), until resv.recover moves it aside.
  local function damaged_store()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    -- written by a plain LuaJIT, not under this file's fake nginx
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(("package.path, package.cpath = %q, %q\n"):format(package.path, package.cpath),
            "local resv = require 'resv'\n",
            ("local s = assert(resv.open { path = %q, sync = 'process' })\n"):format(dir),
            "local t = assert(s:type('c', 'a'))\n",
            "for i = 1, 2000 do assert(t:reserve({ namespace = 'n', key = 'k' .. i }, ",
            "{ id = 'o' }, 'a', 3600000)) end\n",
            "s:close()\n")
    f:close()
    assert(os.execute("luajit " .. script))
    os.remove(script)
    f = assert(io.open(dir .. "/data.mdb", "rb"))
    local head = f:read(3 * 4096)
    f:close()
    f = assert(io.open(dir .. "/data.mdb", "wb"))
    f:write(head)
    f:close()
    return dir
  end

  it("tries a store that did not open again, twice as late each time, until it opens", function()
    local dir = damaged_store()
    local s, err = resv_ngx.open_in_worker({ path = dir, sync = "process" }, { metrics = false })
    assert.is_nil(s)
    assert.matches("^format: .*is damaged", err)
    assert.equal(1, #n.logs)
    local none, why = resv_ngx.store()
    assert.is_nil(none)
    assert.equal(err, why)
    -- still damaged: tried again, the next try twice as far off, the same
    -- error not logged again
    for _, delay in ipairs { 1, 2, 4 } do
      assert.equal(1, #n.timers)
      local timer = table.remove(n.timers)
      assert.equal(delay, timer.at)
      timer.fn(false)
      assert.is_nil(resv_ngx.store())
    end
    assert.equal(1, #n.logs)
    local kept = assert(resv.recover(dir))
    local timer = table.remove(n.timers)
    assert.equal(8, timer.at)
    timer.fn(false)
    local opened = assert(resv_ngx.store())
    stores[#stores + 1] = opened
    assert.equal(0, #n.timers)
    assert.matches("opened the store, which did not open before: format: ", n.logs[#n.logs])
    assert.equal("resv.store: resv store (file " .. dir .. ", sync=process)", tostring(opened))
    os.execute("rm -rf " .. dir .. " " .. kept)
  end)

  it("tries again a path whose parent is not there yet (a volume mounted after nginx)", function()
    local parent = os.tmpname()
    os.remove(parent)
    local dir = parent .. "/store"
    local s, err = resv_ngx.open_in_worker({ path = dir, sync = "process" }, { metrics = false })
    assert.is_nil(s)
    assert.matches("^invalid: path: cannot make the directory " .. dir:gsub("%p", "%%%0"), err)
    assert.equal(1, #n.timers)
    assert(os.execute("mkdir " .. parent))
    table.remove(n.timers).fn(false)
    local opened = assert(resv_ngx.store())
    stores[#stores + 1] = opened
    assert.matches("opened the store, which did not open before: invalid: path: ", n.logs[#n.logs])
    assert.equal("resv.store: resv store (file " .. dir .. ", sync=process)", tostring(opened))
    os.execute("rm -rf " .. parent)
  end)

  it("does not try again invalid options, a worker that exits, or with retry = false", function()
    assert.is_nil(resv_ngx.open_in_worker({ uri = "not a uri" }))
    assert.equal(0, #n.timers)
    local dir = damaged_store()
    assert.is_nil(resv_ngx.open_in_worker({ path = dir }, { metrics = false, retry = false }))
    assert.equal(0, #n.timers)
    assert.is_nil(resv_ngx.open_in_worker({ path = dir }, { metrics = false, retry = 0.5 }))
    local timer = table.remove(n.timers)
    assert.equal(0.5, timer.at)
    timer.fn(true) -- premature: the worker is exiting
    assert.equal(0, #n.timers)
    assert.is_nil(resv_ngx.store())
    assert.has_error(function() resv_ngx.open_in_worker({ path = dir }, { retry = 0 }) end,
                     "resv.ngx.open_in_worker: retry must be a number of seconds > 0 or false")
    os.execute("rm -rf " .. dir)
  end)

  it("says the store was never opened in this Lua VM", function()
    local none, err = resv_ngx.store()
    assert.is_nil(none)
    assert.matches("^closed: no store opened in this Lua VM", err)
  end)

  it("publishes only into a dict nginx.conf declares", function()
    n.shared = {}
    -- none declared: open_in_worker opens without publishing
    local s = assert(resv_ngx.open_in_worker({ per_process = true }))
    stores[#stores + 1] = s
    assert.equal(0, #n.timers)
    assert.has_error(function() resv_ngx.serve_metrics(s) end,
                     "resv.ngx.serve_metrics: nginx.conf has no `lua_shared_dict resv_metrics 1m;`")
    assert.has_error(function() resv_ngx.open_in_worker({ per_process = true }, { metrics = "m" }) end,
                     "resv.ngx.open_in_worker: nginx.conf has no `lua_shared_dict m 1m;` for metrics")
    assert.has_error(function() resv_ngx.publish_metrics(s, { every = 0 }) end)
  end)
end)

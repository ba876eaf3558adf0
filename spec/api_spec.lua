-- The module's surface: options, type names, programmer mistakes, strings.
local resv = require "resv"
local helpers = require "spec.helpers"

describe("resv.open", function()
  it("opens the memory store without options", function()
    local store = assert(resv.open())
    assert.matches("^resv%.store: ", tostring(store))
    store:close()
    store = assert(resv.open {})
    store:close()
  end)

  it("takes every documented option", function()
    local store, err = resv.open {
      database = "app", sharding = "off", threads = 2, queue = 16,
      timeout_ms = 1000, max_string = 64, write_concern = "majority",
      max_holds = 10,
    }
    assert.is_nil(err)
    store:close()
  end)

  local bad = {
    { "options not a table", "x" },
    { "unknown option", { thread = 4 } },
    { "uri not a string", { uri = 27017 } },
    { "uri with NUL", { uri = "mongodb://h\0" } },
    { "database not a string", { database = true } },
    { "empty database", { database = "" } },
    { "sharding unknown", { sharding = "on" } },
    { "sharding not a string", { sharding = 1 } },
    { "threads zero", { threads = 0 } },
    { "threads negative", { threads = -1 } },
    { "threads fraction", { threads = 1.5 } },
    { "threads string", { threads = "8" } },
    { "queue NaN", { queue = 0 / 0 } },
    { "queue inf", { queue = math.huge } },
    { "timeout_ms zero", { timeout_ms = 0 } },
    { "timeout_ms over int32", { timeout_ms = 2 ^ 31 } },
    { "max_string zero", { max_string = 0 } },
    { "max_holds zero", { max_holds = 0 } },
    { "max_holds over 2^20", { max_holds = 2 ^ 20 + 1 } },
    { "write_concern 0 (unacknowledged)", { write_concern = 0 } },
    { "write_concern negative", { write_concern = -1 } },
    { "write_concern unknown", { write_concern = "all" } },
    { "write_concern fraction", { write_concern = 1.5 } },
    { "check not a boolean", { check = 1 } },
  }
  for _, case in ipairs(bad) do
    it("refuses " .. case[1] .. " as invalid", function()
      local store, err = resv.open(case[2])
      assert.is_nil(store)
      assert.matches("^invalid: ", err)
    end)
  end

  it("refuses a new attempt past max_holds, and takes one already there", function()
    local store = assert(resv.open { max_holds = 2 })
    local t = assert(store:type("shop", "user"))
    local key, owner = { namespace = "email", key = "ann" }, { id = "u1" }
    assert.equal("reserved", assert(t:reserve(key, owner, "a1", 1000)).status)
    assert.equal("reserved", assert(t:reserve(key, owner, "a2", 1000)).status)
    local r, err = t:reserve(key, owner, "a3", 1000)
    assert.is_nil(r)
    assert.matches("^invalid: attempt: the reservation already has 2 holds", err)
    r = assert(t:reserve(key, owner, "a1", 1000))
    assert.equal(2, #r.holds)
    store:close()
  end)

  it("answers unavailable for a server that is not there", function()
    local store, err = resv.open { uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200",
                                   timeout_ms = 500, check = true }
    assert.is_nil(store)
    assert.matches("^unavailable", err)
  end)

  it("without check opens at once, and the call answers unavailable", function()
    local store = assert(resv.open { uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200",
                                     timeout_ms = 500 })
    local t = assert(store:type("open", "user"))
    local r, err = t:get { namespace = "n", key = "k" }
    assert.is_nil(r)
    assert.matches("^unavailable", err)
    store:close()
  end)

  it("never shows a password", function()
    local store, err = resv.open { uri = "mongodb://ann:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=200",
                                   timeout_ms = 500, check = true }
    assert.is_nil(store)
    assert.is_nil(err:find("s3cret", 1, true))
    local uri = helpers.mongo_uri()
    if uri then
      store = assert(resv.open { uri = uri })
      assert.matches("mongodb", tostring(store))
      store:close()
    end
  end)
end)

describe("store:type", function()
  local store
  before_each(function() store = assert(resv.open()) end)
  after_each(function() store:close() end)

  it("gives the same type object for the same names", function()
    local a = assert(store:type("shop", "user"))
    assert.equal(a, store:type("shop", "user"))
    assert.equal("wow_reservation__shop__user", a:collection())
    assert.equal("resv.type: wow_reservation__shop__user", tostring(a))
  end)

  local bad = {
    { "an empty context", "", "user" },
    { "an empty aggregate", "shop", "" },
    { "a double underscore", "sh__op", "user" },
    { "a dot", "shop", "us.er" },
    { "a dollar", "$shop", "user" },
    { "a NUL byte", "shop\0", "user" },
    { "a namespace over 255 bytes", string.rep("c", 200), string.rep("a", 60) },
    { "a context not a string", 1, "user" },
    { "an aggregate not a string", "shop", nil },
  }
  for _, case in ipairs(bad) do
    it("refuses " .. case[1] .. " as invalid", function()
      local t, err = store:type(case[2], case[3])
      assert.is_nil(t)
      assert.matches("^invalid: ", err)
    end)
  end
end)

describe("programmer mistakes", function()
  local store, t
  before_each(function()
    store = assert(resv.open())
    t = assert(store:type("shop", "user"))
  end)
  after_each(function() store:close() end)

  it("raise when a method is called with a dot", function()
    local key = { namespace = "email", key = "k" }
    assert.has_error(function() t.reserve(key, { id = "a" }, "x", 10) end)
    assert.has_error(function() t.get(key) end)
    assert.has_error(function() store.type("shop", "user") end)
    assert.has_error(function() store.set_time(5) end)
    assert.has_error(function() store.close() end)
  end)

  it("raise at the caller's line", function()
    local ok, err = pcall(function() t.get({}) end)
    assert.is_false(ok)
    assert.matches("api_spec.lua", err)
  end)

  it("raise when spawn is given no function", function()
    assert.has_error(function() resv.spawn(42) end)
  end)
end)

describe("the store's clock", function()
  it("freezes with set_time and returns to the system clock with nil", function()
    local store = assert(resv.open())
    assert.is_true(store:set_time(12345))
    assert.equal(12345, store:now())
    assert.is_true(store:set_time(nil))
    assert.is_true(math.abs(store:now() - os.time() * 1000) < 5000)
    local ok, err = store:set_time(0 / 0)
    assert.is_nil(ok)
    assert.matches("^invalid: ms", err)
    store:close()
  end)
end)

describe("the module", function()
  it("has a version", function()
    assert.matches("^%d+%.%d+%.%d+", resv._VERSION)
  end)

  it("sets no global and reads none that is not there", function()
    -- A separate LuaJIT, where _G raises on any new or unknown global.
    local script = [[
      package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
      local before = {}
      for k in pairs(_G) do before[k] = true end
      setmetatable(_G, {
        __newindex = function(_, k) error("global written: " .. tostring(k), 2) end,
        __index = function(_, k) error("global read: " .. tostring(k), 2) end,
      })
      local resv = require "resv"
      local store = assert(resv.open())
      local t = assert(store:type("shop", "user"))
      local k, o = { namespace = "n", key = "k" }, { id = "o" }
      assert(t:reserve(k, o, "a", 100)); assert(t:confirm(k, o, 1))
      assert(t:abandon(k, o, "a")); assert(t:get(k)); assert(t:release(k, o))
      resv.spawn(function() assert(t:reserve(k, o, "a", 100)) end)
      assert(resv.run()); resv.poll(); assert(resv.fd())
      store:close(); tostring(store)
      for k in pairs(_G) do
        if not before[k] then error("new global " .. k) end
      end
      io.write("clean")
    ]]
    local name = os.tmpname()
    local f = assert(io.open(name, "w"))
    f:write(script)
    f:close()
    local p = io.popen("luajit " .. name .. " 2>&1")
    local out = p:read("*a")
    p:close()
    os.remove(name)
    assert.equal("clean", out)
  end)
end)

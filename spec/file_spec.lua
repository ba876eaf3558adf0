-- The file store through the Lua API (SPEC section 6): its options, one
-- store for every opener of a directory, reservations kept across a
-- reopen, and the memory store refused in an nginx with several workers.
local resv = require "resv"
local helpers = require "spec.helpers"

local T0 = helpers.T0
local KEY = { namespace = "email", key = "ann@example.com" }
local A = { id = "user-a" }
local B = { id = "user-b" }

describe("the file store", function()
  local dir

  before_each(function()
    dir = helpers.fresh_dir()
  end)

  after_each(function()
    collectgarbage()
    collectgarbage()
    helpers.remove_dir(dir)
  end)

  it("keeps its reservations when it is closed and opened again", function()
    local store = assert(resv.open { path = dir })
    assert(store:set_time(T0))
    local t = assert(store:type("shop", "user"))
    assert.equal("reserved", assert(t:reserve(KEY, A, "a1", 60000)).status)
    assert.equal("confirmed", assert(t:confirm({ namespace = "slug", key = "ann" },
                                               A, 3)).status)
    store:close()

    store = assert(resv.open { path = dir })
    assert(store:set_time(T0 + 1000))
    t = assert(store:type("shop", "user"))
    local r = assert(t:get(KEY))
    assert.same({ status = "pending", owner = { tenant = "", id = "user-a" },
                  expires_at = T0 + 60000, holds = { "a1" } }, r)
    r = assert(t:reserve(KEY, B, "b1", 1000))
    assert.equal("conflict", r.status)
    assert.equal("user-a", r.owner.id)
    r = assert(t:get({ namespace = "slug", key = "ann" }))
    assert.equal("confirmed", r.status)
    assert.equal(3, r.version)
    store:close()
  end)

  it("is one store for every store opened on the directory", function()
    local s1 = assert(resv.open { path = dir })
    local s2 = assert(resv.open { path = dir, sync = "process" })
    local t1 = assert(s1:type("shop", "user"))
    local t2 = assert(s2:type("shop", "user"))
    assert.equal("reserved", assert(t1:reserve(KEY, A, "a1", 60000)).status)
    local r = assert(t2:reserve(KEY, B, "b1", 60000))
    assert.equal("conflict", r.status)
    assert.equal("user-a", r.owner.id)
    s1:close()
    s2:close()
  end)

  it("with sync = disk answers as with sync = process", function()
    local store = assert(resv.open { path = dir, sync = "disk", map_size = 2 ^ 24 })
    local t = assert(store:type("shop", "user"))
    local r = assert(t:reserve(KEY, A, "a1", 60000))
    assert.equal("reserved", r.status)
    assert.equal("abandoned", assert(t:abandon(KEY, A, "a1")).status)
    assert.equal("absent", assert(t:get(KEY)).status)
    store:close()
  end)

  it("refuses bad options as invalid, naming them", function()
    local cases = {
      { { path = dir, uri = "mongodb://127.0.0.1:1/x" }, "^invalid: path and uri" },
      { { path = "" }, "^invalid: path" },
      { { path = 42 }, "^invalid: path" },
      { { path = dir, sync = "sometimes" }, "^invalid: sync" },
      { { path = dir, map_size = 4096 }, "^invalid: map_size" },
      { { path = dir, map_size = 2 ^ 60 }, "^invalid: map_size" },
      { { path = dir, sweep_grace_ms = -1 }, "^invalid: sweep_grace_ms" },
      { { per_process = "yes" }, "^invalid: per_process" },
    }
    for _, case in ipairs(cases) do
      local store, err = resv.open(case[1])
      assert.is_nil(store)
      assert.matches(case[2], err)
    end
  end)

  it("refuses a directory that is not a resv store", function()
    os.execute("mkdir -p '" .. dir .. "'")
    local f = assert(io.open(dir .. "/notes.txt", "w"))
    f:write("mine\n")
    f:close()
    local store, err = resv.open { path = dir }
    assert.is_nil(store)
    assert.matches("^format: path: .* is not a resv store", err)
    os.remove(dir .. "/notes.txt")
  end)
end)

describe("the memory store in nginx", function()
  local saved

  before_each(function()
    saved = rawget(_G, "ngx")
  end)

  after_each(function()
    rawset(_G, "ngx", saved)
  end)

  local function workers(n)
    rawset(_G, "ngx", { worker = { count = function() return n end } })
  end

  it("is invalid with several workers, naming path and uri", function()
    workers(4)
    local store, err = resv.open {}
    assert.is_nil(store)
    assert.matches("^invalid: ", err)
    assert.matches("path", err)
    assert.matches("uri", err)
    assert.matches("4 workers", err)
  end)

  it("opens with several workers when per_process = true", function()
    workers(4)
    local store = assert(resv.open { per_process = true })
    store:close()
  end)

  it("opens with one worker", function()
    workers(1)
    local store = assert(resv.open {})
    store:close()
  end)

  it("leaves the file store alone with several workers", function()
    workers(4)
    local dir = helpers.fresh_dir()
    local store = assert(resv.open { path = dir })
    store:close()
    collectgarbage()
    collectgarbage()
    helpers.remove_dir(dir)
  end)
end)

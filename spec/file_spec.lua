-- The file store through the Lua API (docs/design.md section 6): its options, one
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
    local s2 = assert(resv.open { path = dir, sync = "disk" })
    local t1 = assert(s1:type("shop", "user"))
    local t2 = assert(s2:type("shop", "user"))
    assert.equal("reserved", assert(t1:reserve(KEY, A, "a1", 60000)).status)
    local r = assert(t2:reserve(KEY, B, "b1", 60000))
    assert.equal("conflict", r.status)
    assert.equal("user-a", r.owner.id)
    s1:close()
    s2:close()
  end)

  it("syncs to the disk by default", function()
    local store = assert(resv.open { path = dir })
    assert.matches("sync=disk", tostring(store), 1, true)
    store:close()
    store = nil
    collectgarbage() -- the environment goes with the last handle
    collectgarbage()
    store = assert(resv.open { path = dir, sync = "process" })
    assert.matches("sync=process", tostring(store), 1, true)
    store:close()
  end)

  it("with sync = process answers as with sync = disk", function()
    local store = assert(resv.open { path = dir, sync = "process", map_size = 2 ^ 24 })
    local t = assert(store:type("shop", "user"))
    local r = assert(t:reserve(KEY, A, "a1", 60000))
    assert.equal("reserved", r.status)
    assert.equal("abandoned", assert(t:abandon(KEY, A, "a1")).status)
    assert.equal("absent", assert(t:get(KEY)).status)
    store:close()
  end)

  -- A crash of the OS, as the store finds it: resv.state says dirty (its
  -- last commits came after its last checkpoint) in another boot.
  local function crash_the_os(path, look_first)
    collectgarbage() -- the closed stores' handles, and with them LMDB's
    collectgarbage()
    if look_first then -- closed: checkpointed, clean, nothing to recover
      assert.is_false(resv.recover(path))
    end
    local f = assert(io.open(path .. "/resv.state", "w"))
    f:write("resv-state 1\nstate dirty\nboot an-earlier-boot\nreplaced 0\n")
    f:close()
  end

  it("refuses a store an OS crash may have damaged; resv.recover moves it aside", function()
    local store = assert(resv.open { path = dir, sync = "process" })
    local t = assert(store:type("shop", "user"))
    assert.equal("reserved", assert(t:reserve(KEY, A, "a1", 60000)).status)
    store:close()
    store, t = nil, nil
    crash_the_os(dir, true)
    local s, err = resv.open { path = dir, sync = "process" }
    assert.is_nil(s)
    assert.equal("format: " .. dir .. " may be damaged by a crash of the OS (its last "
                 .. "commits came after its last checkpoint, in an earlier boot): run resv "
                 .. "recover --path " .. dir .. ', or open it with on_os_crash = "reset"', err)
    local kept = assert(resv.recover(dir))
    assert.matches("^" .. dir:gsub("%p", "%%%0") .. "%.crashed%-%d+T%d+Z$", kept)
    store = assert(resv.open { path = dir, sync = "process" })
    t = assert(store:type("shop", "user"))
    assert.equal("absent", assert(t:get(KEY)).status)
    store:close()
    helpers.remove_dir(kept)
  end)

  it("with on_os_crash = reset starts empty after an OS crash", function()
    local store = assert(resv.open { path = dir, sync = "process" })
    assert.equal("reserved", assert(store:type("shop", "user"):reserve(KEY, A, "a1", 60000)).status)
    store:close()
    store = nil
    crash_the_os(dir)
    store = assert(resv.open { path = dir, sync = "process", on_os_crash = "reset" })
    assert.equal("absent", assert(store:type("shop", "user"):get(KEY)).status)
    store:close()
    local kept = assert(io.popen("ls -d " .. dir .. ".crashed-*")):read("*l")
    assert.truthy(io.open(kept .. "/data.mdb")):close()
    helpers.remove_dir(kept)
  end)

  it("refuses bad options as invalid, naming them", function()
    local cases = {
      { { path = dir, uri = "mongodb://127.0.0.1:1/x" }, "^invalid: path and uri" },
      { { path = "" }, "^invalid: path" },
      { { path = 42 }, "^invalid: path" },
      { { path = dir, sync = "sometimes" }, "^invalid: sync" },
      { { path = dir, on_os_crash = "ignore" }, "^invalid: on_os_crash" },
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

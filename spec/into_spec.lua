-- The per-call option { into = t } (docs/lua.md): the answer is written
-- into the caller's table t, the one returned, with t's owner and holds
-- tables reused, so a hot loop (a gateway's) allocates no answer. It must
-- be the very answer a call without it gives, shape after shape (each
-- shape clearing the fields of the one before), in every waiting mode, on
-- every store.
local resv = require "resv"
local helpers = require "spec.helpers"

local T0 = helpers.T0
local GRACE = 1000

local A = { tenant = "t1", id = "ann" }
local B = { tenant = "t2", id = "bob" }
local function key(name)
  return { namespace = "email", key = name }
end

-- Every answer shape of docs/design.md section 9, in an order where each one follows
-- a different one; { "time", ms } moves the store's clock.
local SCRIPT = {
  { "reserve", key("k1"), A, "a1", 1000 },      -- reserved, one hold
  { "reserve", key("k1"), A, "a2", 1000 },      -- two holds
  { "reserve", key("k1"), A, "a3", 1000 },      -- three
  { "get", key("k1") },                         -- pending, three holds
  { "reserve", key("k1"), B, "b1", 1000 },      -- conflict, pending
  { "abandon", key("k1"), A, "a2" },            -- kept
  { "reserve", key("k2"), A, "a1", 10 },        -- reserved: the holds shrink to one
  { "confirm", key("k1"), A, 1 },               -- confirmed
  { "reserve", key("k1"), B, "b1", 1000 },      -- conflict, confirmed
  { "get", key("k1") },                         -- confirmed
  { "get", key("nobody") },                     -- absent
  { "time", 11 },
  { "get", key("k2") },                         -- expired
  { "reserve", key("k2"), B, "b1", 1000 },      -- reserved by another owner
  { "abandon", key("k2"), B, "b1" },            -- abandoned
  { "abandon", key("k2"), B, "b1" },            -- absent
  { "release", key("k1"), A },                  -- released
  { "release", key("k1"), A },                  -- absent
  { "reserve", key("k3"), A, "a1", 10 },
  { "time", 11 + 10 + GRACE },
  { "sweep" },                                  -- swept, count 1
  { "reserve", key("k3"), B, "b1", 1000 },
}

-- The calls' arities: opts comes after the last argument.
local ARGS = { reserve = 4, confirm = 3, abandon = 3, release = 2, get = 1, sweep = 0 }

local function call(t, step, opts)
  local op = step[1]
  local args = { unpack(step, 2, ARGS[op] + 1) }
  args[ARGS[op] + 1] = opts
  return t[op](t, unpack(args, 1, ARGS[op] + 1))
end

-- A deep copy: what the into table held after a call, before the next one
-- overwrites it.
local function copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = copy(x) end
  return c
end

local BACKENDS = helpers.backends { file = true }
-- The file stores' directories go after the file's last test.
teardown(function() helpers.remove_backends(BACKENDS) end)

for _, backend in ipairs(BACKENDS) do
  for _, mode in ipairs(helpers.modes) do
    describe("{ into = t } on the " .. backend.name .. " store (" .. mode .. ")", function()
      local store, fresh, reused

      before_each(function()
        store, fresh = helpers.fresh_type(backend, { sweep_grace_ms = GRACE })
        reused = assert(store:type(helpers.fresh_context(), "user"))
      end)

      after_each(function()
        store:close()
      end)

      it("gives the same answers as a fresh table, in the caller's table, reusing its owner and holds", function()
        local into = {}
        local opts = { into = into }
        local owner, holds -- the previous answer's
        local shapes = {}
        helpers.in_mode(mode, function()
          for i, step in ipairs(SCRIPT) do
            if step[1] == "time" then
              assert(store:set_time(T0 + step[2]))
            else
              local want = assert(call(fresh, step))
              local got = assert(call(reused, step, opts))
              assert.equal(into, got, "step " .. i .. ": not the caller's table")
              assert.same(want, copy(got), "step " .. i .. " (" .. step[1] .. ")")
              -- An answer without an owner (or holds) sets it to nil: the
              -- next one makes a new table, which the ones after reuse.
              if got.owner and owner then
                assert.equal(owner, got.owner, "step " .. i .. ": a new owner table")
              end
              if got.holds and holds then
                assert.equal(holds, got.holds, "step " .. i .. ": a new holds table")
              end
              owner, holds = got.owner, got.holds
              shapes[want.status] = true
            end
          end
        end)
        for _, status in ipairs { "reserved", "pending", "conflict", "kept", "confirmed",
                                  "absent", "expired", "abandoned", "released", "swept" } do
          assert.is_true(shapes[status], "the script never answered " .. status)
        end
      end)

      it("refuses an into that is not a table, and leaves the table alone on an error", function()
        local r, err = fresh:reserve(key("k"), A, "a", 1000, { into = "t" })
        assert.is_nil(r)
        assert.equal("invalid: into: expected a table, got string", err)
        r, err = fresh:reserve(key("k"), A, "a", 1000, { into = {}, limit = 1 })
        assert.is_nil(r)
        assert.matches("^invalid: unknown call option limit", err)
        local into = { status = "reserved", owner = { tenant = "x", id = "y" } }
        r, err = fresh:reserve(key(""), A, "a", 1000, { into = into })
        assert.is_nil(r)
        assert.matches("^invalid: ", err)
        assert.same({ status = "reserved", owner = { tenant = "x", id = "y" } }, into)
        assert.equal("absent", assert(fresh:get(key("k"))).status)
      end)
    end)
  end
end

describe("{ into = t } with the JIT on and a busy collector", function()
  -- Keys computed by __index, a full step of the collector at every read,
  -- owners and attempts that are temporaries: each answer in the reused
  -- table names them right, the holder's strings copied out of C.
  it("answers into one table, call after call, with temporaries", function()
    local store = assert(resv.open())
    local t = assert(store:type("into", "busy"))
    local pause = collectgarbage("setpause", 1) -- a cycle always under way
    local stepmul = collectgarbage("setstepmul", 400)
    finally(function()
      collectgarbage("setpause", pause)
      collectgarbage("setstepmul", stepmul)
      store:close()
    end)
    local opts = { into = {} }
    local wrong = {}
    for i = 1, 500 do
      local key = setmetatable({}, { __index = function(_, f)
        collectgarbage("step")
        if f == "namespace" then return "email" end
        if f == "key" then return "busy" .. i .. "@example.com" end
      end })
      local r = t:reserve(key, { tenant = "t" .. i % 3, id = "user-" .. i }, "a" .. i, 60000, opts)
      if not (r == opts.into and r.status == "reserved" and r.owner.id == "user-" .. i
              and r.owner.tenant == "t" .. i % 3 and #r.holds == 1 and r.holds[1] == "a" .. i) then
        wrong[#wrong + 1] = "reserve " .. i
      end
      r = t:reserve(key, { id = "other" .. i }, "b", 60000, opts)
      if not (r and r.status == "conflict" and r.owner.id == "user-" .. i
              and r.owner.tenant == "t" .. i % 3 and r.state == "pending" and r.holds == nil) then
        wrong[#wrong + 1] = "conflict " .. i
      end
    end
    assert.same({}, wrong)
  end)
end)

describe("{ into = t } on the memory store", function()
  -- With the collector stopped, what the heap grows by is what the calls
  -- allocate: a fresh answer is two or three tables (about 100 to 200
  -- bytes), an answer into a table nothing (a byte or two a call goes to
  -- the JIT compiler's first traces). One call a loop: two make LuaJIT
  -- run part of it interpreted, which boxes the answer's 64-bit integers.
  -- The measure runs in a fresh LuaJIT: in the spec runner's process the
  -- traces of the call path carry what earlier specs did to them (an
  -- aborted or flushed trace runs the loop interpreted), which is the
  -- runner's state, not the call's.
  local CHILD = [[
package.path, package.cpath = %q, %q
local resv = require "resv"
local N = 20000
local keys = {}
for i = 1, N do keys[i] = { namespace = "email", key = "m" .. i } end
local function grows_by(t, owner, opts, status)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  local wrong = 0
  for i = 1, N do
    local r = t:reserve(keys[i], owner, "a", 60000, opts)
    if not r or r.status ~= status then wrong = wrong + 1 end
  end
  local after = collectgarbage("count")
  collectgarbage("restart")
  assert(wrong == 0, wrong .. " wrong answers")
  return (after - before) * 1024 / N
end
local store = assert(resv.open())
local plain, into = assert(store:type("into", "plain")), assert(store:type("into", "reused"))
local opts = { into = {} }
for _, case in ipairs { { { tenant = "t1", id = "ann" }, "reserved" },
                        { { tenant = "t2", id = "bob" }, "conflict" } } do
  io.write(case[2], " ", grows_by(plain, case[1], nil, case[2]), " ",
           grows_by(into, case[1], opts, case[2]), "\n")
end
store:close()
]]

  it("allocates nothing per call, where a fresh answer allocates its tables", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(CHILD:format(package.path, package.cpath))
    f:close()
    local out = io.popen("luajit " .. script .. " 2>&1")
    local text = out:read("*a")
    out:close()
    os.remove(script)
    local seen = 0
    for status, fresh, reused in text:gmatch("(%a+) (%S+) (%S+)\n") do
      fresh, reused = tonumber(fresh), tonumber(reused)
      assert.is_true(fresh > 80, status .. ", fresh answers: " .. fresh .. " bytes a call")
      assert.is_true(reused < 8, status .. ", answers into a table: " .. reused .. " bytes a call")
      seen = seen + 1
    end
    assert.equal(2, seen, text)
  end)
end)

describe("{ into = t } on a call that waits", function()
  -- A spawned call on a file store with sync = "disk" submits, yields and
  -- is resumed by resv.run. With the collector stopped, the heap grows by
  -- what a call and the loop that resumes it allocate: the job, its 64-bit
  -- numbers and addresses boxed (the interpreter runs the part of the path
  -- before the yield), and no table: the request's fields travel as
  -- arguments and the loop reuses its lists. A table of the request's ten
  -- fields would be about 450 bytes a call. Measured in a fresh LuaJIT, as
  -- above.
  local CHILD = [[
package.path, package.cpath = %q, %q
local resv = require "resv"
local dir = %q
local store = assert(resv.open { path = dir, sync = "disk" })
local t = assert(store:type("into", "waited"))
local N = 2000
local keys = {}
for i = 1, N do keys[i] = { namespace = "email", key = "w" .. i } end
local owner = { tenant = "t1", id = "ann" }
local opts = { into = {} }
local bytes, wrong = nil, 0
resv.spawn(function()
  for i = 1, 200 do assert(t:reserve({ namespace = "warm", key = "w" .. i }, owner, "a", 60000, opts)) end
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for i = 1, N do
    local r = t:reserve(keys[i], owner, "a", 60000, opts)
    if not r or r.status ~= "reserved" then wrong = wrong + 1 end
  end
  bytes = (collectgarbage("count") - before) * 1024 / N
  collectgarbage("restart")
end)
assert(resv.run())
store:close()
io.write(wrong, " ", bytes, "\n")
]]

  it("allocates no table per call", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(CHILD:format(package.path, package.cpath, dir))
    f:close()
    local out = io.popen("luajit " .. script .. " 2>&1")
    local text = out:read("*a")
    out:close()
    os.remove(script)
    os.execute("rm -rf " .. dir)
    local wrong, bytes = text:match("^(%d+) (%S+)\n")
    assert.equal("0", wrong, text)
    assert.is_true(tonumber(bytes) < 160, bytes .. " bytes a waited call")
  end)
end)

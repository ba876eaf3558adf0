-- Hostile and careless input (issue 8), beyond spec/invalid_spec.lua:
--   * bad arguments for every entry point, operator-looking tables where a
--     string belongs: invalid, and nothing written;
--   * operator-looking strings ("$where", "$gt", "$$ROOT", '{"$gt": ""}')
--     are valid strings: stored and answered literally, as BSON strings
--     (read back with pymongo, an independent client);
--   * one tenant never reads or changes another's reservations;
--   * a password in the URI never shows in errors or tostring(store).
local resv = require "resv"
local helpers = require "spec.helpers"

local KEY = { tenant = "", namespace = "email", key = "ann@example.com" }
local OWNER = { tenant = "t1", id = "user-42" }
local OP = { ["$gt"] = "" }

local bad_calls = {
  { "a key.key table {$gt = ''}", function(t) return t:reserve({ namespace = "n", key = OP }, OWNER, "a", 100) end },
  { "a key.namespace table", function(t) return t:confirm({ namespace = OP, key = "k" }, OWNER, 1) end },
  { "a key.tenant table", function(t) return t:get({ tenant = OP, namespace = "n", key = "k" }) end },
  { "an owner.id table {$where = ...}", function(t) return t:reserve(KEY, { id = { ["$where"] = "1" } }, "a", 100) end },
  { "an owner.tenant table", function(t) return t:release(KEY, { tenant = OP, id = "u" }) end },
  { "an attempt table", function(t) return t:abandon(KEY, OWNER, OP) end },
  { "a key nil on confirm", function(t) return t:confirm(nil, OWNER, 1) end },
  { "a key nil on abandon", function(t) return t:abandon(nil, OWNER, "a") end },
  { "a key nil on release", function(t) return t:release(nil, OWNER) end },
  { "an owner nil on confirm", function(t) return t:confirm(KEY, nil, 1) end },
  { "an owner nil on abandon", function(t) return t:abandon(KEY, nil, "a") end },
  { "an attempt nil on abandon", function(t) return t:abandon(KEY, OWNER, nil) end },
  { "a key a function", function(t) return t:get(function() end) end },
  { "a key a boolean", function(t) return t:get(true) end },
  { "a key.key a boolean", function(t) return t:get({ namespace = "n", key = false }) end },
  { "a key an array", function(t) return t:get({ "", "n", "k" }) end },
  { "an empty key on get", function(t) return t:get({ namespace = "n", key = "" }) end },
  { "a NUL in the namespace", function(t) return t:get({ namespace = "n\0", key = "k" }) end },
  { "a NUL in the owner id on release", function(t) return t:release(KEY, { id = "\0" }) end },
  { "invalid UTF-8 in the attempt on abandon", function(t) return t:abandon(KEY, OWNER, "\237\160\128") end },
  { "an over-long owner id on abandon", function(t) return t:abandon(KEY, { id = string.rep("y", 1025) }, "a") end },
  { "an over-long namespace on get", function(t) return t:get({ namespace = string.rep("n", 1025), key = "k" }) end },
  { "a ttl of 2^53", function(t) return t:reserve(KEY, OWNER, "a", 2 ^ 53) end },
  { "a ttl over ten years", function(t) return t:reserve(KEY, OWNER, "a", 10 * 366 * 24 * 3600 * 1000 + 1) end },
  { "a ttl of -2^63", function(t) return t:reserve(KEY, OWNER, "a", -2 ^ 63) end },
  { "a ttl a table", function(t) return t:reserve(KEY, OWNER, "a", { 100 }) end },
  { "a version of 2^60", function(t) return t:confirm(KEY, OWNER, 2 ^ 60) end },
  { "a version of -1e300", function(t) return t:confirm(KEY, OWNER, -1e300) end },
  { "a version a string", function(t) return t:confirm(KEY, OWNER, "1") end },
}

local bad_types = {
  { "a context table", OP, "user" },
  { "an aggregate nil", "shop", nil },
  { "an empty context", "", "user" },
  { "a context with a dot", "a.b", "user" },
  { "a context with $", "$where", "user" },
  { "an aggregate with __", "shop", "a__b" },
  { "a context with NUL", "s\0", "user" },
  { "an aggregate not UTF-8", "shop", "\255" },
  { "an over-long aggregate", "shop", string.rep("u", 300) },
}

local literal = { "$where", "$gt", "$$ROOT", '{"$gt": ""}', "$ne", "$$REMOVE", "a.b", "$" }

-- The stored document of key, checked by pymongo: every field a string
-- equal to what was given. Returns "ok" or what differs.
local CHECK_PY = [[
import sys
from pymongo import MongoClient
uri, coll, t, n, k, ot, oid, att = sys.argv[1:9]
c = MongoClient(uri, serverSelectionTimeoutMS=3000)
db = c.get_default_database('resv')
from bson.son import SON
doc = db[coll].find_one({'_id': SON([('t', t), ('n', n), ('k', k)])})
want = [(('_id', 't'), t), (('_id', 'n'), n), (('_id', 'k'), k), (('tenant_id',), t),
        (('key',), k), (('owner', 'tenant_id'), ot), (('owner', 'id'), oid)]
bad = []
if doc is None:
    print('no document'); sys.exit(0)
for path, value in want:
    v = doc
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    if not isinstance(v, str) or v != value:
        bad.append('%s=%r' % ('.'.join(path), v))
if doc.get('holds') != [att]:
    bad.append('holds=%r' % (doc.get('holds'),))
print('ok' if not bad else ' '.join(bad))
]]

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function stored_ok(uri, coll, t, n, k, ot, oid, att)
  -- A file of this run's own: several runs of the suite may share /tmp.
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(CHECK_PY)
  f:close()
  local cmd = "/usr/bin/python3 " .. path
  for _, a in ipairs({ uri, coll, t, n, k, ot, oid, att }) do
    cmd = cmd .. " " .. sh_quote(a)
  end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  os.remove(path)
  return (out:gsub("%s+$", ""))
end

for _, backend in ipairs(helpers.backends()) do
  describe("hostile input on " .. backend.name, function()
    local store, t
    setup(function()
      store, t = helpers.fresh_type(backend)
    end)
    teardown(function()
      store:close()
    end)

    for _, case in ipairs(bad_calls) do
      it("answers invalid for " .. case[1] .. " and writes nothing", function()
        local r, err = case[2](t)
        assert.is_nil(r)
        assert.matches("^invalid: ", err)
        assert.same({ status = "absent" }, assert(t:get(KEY)))
        assert.same({ status = "absent" }, assert(t:get({ namespace = "n", key = "k" })))
      end)
    end

    for _, case in ipairs(bad_types) do
      it("refuses a type with " .. case[1], function()
        local ty, err = store:type(case[2], case[3])
        assert.is_nil(ty)
        assert.matches("^invalid: ", err)
      end)
    end

    it("stores operator-looking strings literally, in every field", function()
      for i, s in ipairs(literal) do
        local other = literal[i % #literal + 1]
        local key = { tenant = s, namespace = s, key = s }
        local owner = { tenant = s, id = s }
        local r = assert(t:reserve(key, owner, s, 60000))
        assert.same({ "reserved", owner, { s } }, { r.status, r.owner, r.holds })
        local c = assert(t:reserve(key, { tenant = s, id = other }, s, 60000))
        assert.equal("conflict", c.status)
        assert.same(owner, c.owner)
        assert.equal("absent", assert(t:release(key, { tenant = s, id = other })).status)
        assert.equal("absent", assert(t:get({ tenant = s, namespace = s, key = other })).status)
        if backend.name == "mongodb" then
          assert.equal("ok", stored_ok(backend.options.uri, t:collection(), s, s, s, s, s, s))
        end
        assert.equal("confirmed", assert(t:confirm(key, owner, 2)).status)
        assert.equal("kept", assert(t:abandon(key, owner, s)).status)
        assert.same({ status = "confirmed", owner = owner, version = 2 }, assert(t:get(key)))
      end
    end)

    it("keeps tenants apart", function()
      local tenants = { "", "t1", "t2", "$ne", '{"$ne": ""}', ".*" }
      for i, tenant in ipairs(tenants) do
        local key = { tenant = tenant, namespace = "email", key = "same@example.com" }
        assert.equal("reserved", assert(t:reserve(key, { tenant = tenant, id = "u" .. i }, "a", 60000)).status)
      end
      for i, tenant in ipairs(tenants) do
        local key = { tenant = tenant, namespace = "email", key = "same@example.com" }
        for j, other in ipairs(tenants) do
          if i ~= j then
            local intruder = { tenant = other, id = "u" .. j }
            assert.equal("absent", assert(t:abandon(key, intruder, "a")).status)
            assert.equal("absent", assert(t:release(key, intruder)).status)
            assert.equal("conflict", assert(t:confirm(key, intruder, 1)).status)
          end
        end
        local g = assert(t:get(key))
        assert.same({ "pending", { tenant = tenant, id = "u" .. i } }, { g.status, g.owner })
      end
    end)
  end)
end

describe("passwords", function()
  local function no_secret(text)
    assert.is_nil(text:find("s3cret", 1, true), text)
  end

  it("never show when the server is unreachable", function()
    for _, uri in ipairs({ "mongodb://user:s3cret@127.0.0.1:1/",
                           "mongodb://user:s3cret@127.0.0.1:1/app?authSource=admin",
                           "mongodb://user:s3cret@[::1/" }) do
      local store, err = resv.open { uri = uri, timeout_ms = 500 }
      if store then
        no_secret(tostring(store))
        local t = assert(store:type("sec", "user"))
        local _, cerr = t:get(KEY)
        no_secret(tostring(cerr))
        store:close()
      else
        no_secret(err)
      end
    end
  end)

  local uri = helpers.mongo_uri()
  if uri then
    it("never show when the server is reachable", function()
      local with_password = uri:gsub("^mongodb://", "mongodb://user:s3cret@")
      local store, err = resv.open { uri = with_password, timeout_ms = 1000 }
      if not store then
        no_secret(err)
        return
      end
      no_secret(tostring(store))
      local t = assert(store:type(helpers.fresh_context(), "user"))
      local r, cerr = t:reserve(KEY, OWNER, "a", 1000)
      if not r then no_secret(cerr) end
      store:close()
      local _, closed = t:get(KEY)
      no_secret(tostring(closed))
    end)
  end
end)

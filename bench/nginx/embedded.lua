-- bench/nginx/embedded.lua: the memory store against ngx.shared.DICT, in
-- the same nginx worker, in one request (so HTTP costs nothing here).
--
-- GET /run?n=KEYS&rounds=R runs R rounds; each round, on fresh state (new
-- memory stores, closed at the round's end; the dict flushed and its
-- expired items freed; each answer kept and each pass charged for
-- collecting its garbage, as bench/nginx/charged.lua says):
--   dict add, new keys        dict:add(key, owner)        -> true
--   resv reserve, new keys    users:reserve(key, owner)   -> "reserved"
--   dict add, existing keys   dict:add(key, other owner)  -> false, "exists"
--   resv reserve, held keys   users:reserve(key, other)   -> "conflict"
--   the same two, each answer into one reused table ({ into = r }), on a
--   type of their own
-- timed with clock_gettime(CLOCK_MONOTONIC) through the FFI (ngx.now has
-- millisecond steps). users:reserve is what lua/resv.lua ships: on the
-- memory store (which answers inline) it calls resv_call into the module's
-- reused answer buffer, never a job, even in this yieldable phase. A third
-- pass, the floor, calls resv_call through the FFI with no argument checks
-- and no answer table. Then users:reserve on the file store (sync =
-- "process", each call its own LMDB write transaction), new keys and held
-- ones, and the same floor there (resv_call through the FFI). Then users:reserve_all of two new keys (the e-mail and a user
-- name) on the memory store, fresh answers, against that round's
-- users:reserve of new keys. The keys are the same strings for all. It answers
-- one "figure <name> <ns per op>" line per measurement (medians over the
-- rounds) and the resv/dict throughput ratios.
local ffi = require "ffi"
local resv = require "resv"

local C = require "resv.ffi"

local now_ns = require "clock"

local _M = {}
local store_file

function _M.init_worker()
  -- The file store (sync = "process"), in a directory the script made.
  store_file = assert(resv.open { path = ngx.config.prefix() .. "store", sync = "process" })
end

-- The floor: resv_call through the FFI with a request filled once per key,
-- no argument checks, no answer table: what the C core alone costs.
local raw_req = ffi.new("resv_request_t")
local raw_answer = ffi.new("resv_answer_t")
local raw_err = ffi.new("resv_error_t")
local function raw_pass(users, keys, owner, expect)
  local h = users.handle
  local n = #keys
  raw_req.op = C.RESV_OP_RESERVE
  raw_req.key.tenant.ptr, raw_req.key.tenant.len = "", 0
  raw_req.key.ns.ptr, raw_req.key.ns.len = "email", 5
  raw_req.owner.tenant.ptr, raw_req.owner.tenant.len = owner.tenant, #owner.tenant
  raw_req.owner.id.ptr, raw_req.owner.id.len = owner.id, #owner.id
  raw_req.attempt.ptr, raw_req.attempt.len = "req-1", 5
  raw_req.ttl_ms = 60000
  local t0 = now_ns()
  for i = 1, n do
    local k = keys[i].key
    raw_req.key.key.ptr, raw_req.key.key.len = k, #k
    if not C.resv_call(h, raw_req, raw_answer, raw_err) or raw_answer.status ~= expect then
      error("raw reserve failed")
    end
  end
  return (now_ns() - t0) / n
end

local function median(t)
  table.sort(t)
  local n = #t
  if n % 2 == 1 then return t[(n + 1) / 2] end
  return (t[n / 2] + t[n / 2 + 1]) / 2
end

local OWNER = { tenant = "t1", id = "user-42" }
local OTHER = { tenant = "t1", id = "user-43" }
local OWNER_VALUE = "t1\0user-42"
local OTHER_VALUE = "t1\0user-43"

local function dict_pass(dict, names, value, expect)
  local n = #names
  local t0 = now_ns()
  for i = 1, n do
    local ok, err = dict:add(names[i], value)
    if ok ~= expect then error("dict add: " .. tostring(err)) end
  end
  return (now_ns() - t0) / n
end

-- Each pass keeps its answers and is charged for its garbage (charged.lua).
local charged = require "charged"
local KEPT, kept = charged.KEPT, charged.kept

local function resv_pass(users, keys, owner, expect, opts)
  local n = #keys
  local t0 = now_ns()
  for i = 1, n do
    local r, err = users:reserve(keys[i], owner, "req-1", 60000, opts)
    if not r or r.status ~= expect then error("reserve: " .. tostring(err)) end
    kept[i % KEPT] = r
  end
  return (now_ns() - t0) / n
end

-- reserve_all of key_pairs[i] (two key tables) on new keys, fresh answers.
local function all_pass(users, key_pairs, owner)
  local n = #key_pairs
  local t0 = now_ns()
  for i = 1, n do
    local r, err = users:reserve_all(key_pairs[i], owner, "req-1", 60000)
    if not r or r.status ~= "reserved" then error("reserve_all: " .. tostring(err)) end
    kept[i % KEPT] = r
  end
  return (now_ns() - t0) / n
end

local function pass(fn, on, inputs, ...)
  return charged.pass(#inputs, fn, on, inputs, ...)
end

local rounds_done = 0

function _M.run()
  local args = ngx.req.get_uri_args()
  local n = tonumber(args.n) or 100000
  local rounds = tonumber(args.rounds) or 5
  local dict = ngx.shared.bench_dict
  local names, keys, key_pairs = {}, {}, {}
  for i = 1, n do
    -- The dict's key is the whole unique key: tenant, namespace, key.
    names[i] = "\0email\0user" .. i .. "@example.com"
    keys[i] = { tenant = "", namespace = "email", key = "user" .. i .. "@example.com" }
    key_pairs[i] = { keys[i], { tenant = "", namespace = "username", key = "user" .. i } }
  end
  local f = { dict_new = {}, resv_new = {}, dict_conflict = {}, resv_conflict = {},
              into_new = {}, into_conflict = {},
              raw_new = {}, raw_conflict = {}, file_new = {}, file_conflict = {},
              file_raw_new = {}, file_raw_conflict = {},
              all_new = {}, all_over_reserve = {} }
  local into = { into = {} }
  for round = 1, rounds do
    rounds_done = rounds_done + 1
    dict:flush_all()
    dict:flush_expired(0)
    -- The memory stores are made anew each round and closed at its end,
    -- so every round starts on an empty heap of entries: the entries of
    -- earlier rounds (2.5 million by round five) slowed new keys by a
    -- third, though no pass reads them.
    local store, store_raw = assert(resv.open()), assert(resv.open())
    local users = assert(store:type("bench", "r" .. rounds_done))
    local both = assert(store:type("bench", "a" .. rounds_done))
    local reused = assert(store:type("bench", "i" .. rounds_done))
    local raw = assert(store_raw:type("bench", "r" .. rounds_done))
    local file = assert(store_file:type("bench", "r" .. rounds_done))
    local file_raw = assert(store_file:type("bench", "f" .. rounds_done))
    f.dict_new[round] = pass(dict_pass, dict, names, OWNER_VALUE, true)
    f.resv_new[round] = pass(resv_pass, users, keys, OWNER, "reserved")
    f.all_new[round] = pass(all_pass, both, key_pairs, OWNER)
    f.all_over_reserve[round] = f.all_new[round] / f.resv_new[round]
    f.dict_conflict[round] = pass(dict_pass, dict, names, OTHER_VALUE, false)
    f.resv_conflict[round] = pass(resv_pass, users, keys, OTHER, "conflict")
    f.into_new[round] = pass(resv_pass, reused, keys, OWNER, "reserved", into)
    f.into_conflict[round] = pass(resv_pass, reused, keys, OTHER, "conflict", into)
    f.raw_new[round] = pass(raw_pass, raw, keys, OWNER, C.RESV_RESERVED)
    f.raw_conflict[round] = pass(raw_pass, raw, keys, OTHER, C.RESV_CONFLICT)
    f.file_new[round] = pass(resv_pass, file, keys, OWNER, "reserved")
    f.file_conflict[round] = pass(resv_pass, file, keys, OTHER, "conflict")
    f.file_raw_new[round] = pass(raw_pass, file_raw, keys, OWNER, C.RESV_RESERVED)
    f.file_raw_conflict[round] = pass(raw_pass, file_raw, keys, OTHER, C.RESV_CONFLICT)
    store:close()
    store_raw:close()
  end
  local ratios = f.all_over_reserve
  table.sort(ratios)
  local out = {}
  for _, name in ipairs { "dict_new", "resv_new", "dict_conflict", "resv_conflict",
                          "into_new", "into_conflict", "raw_new", "raw_conflict", "file_new", "file_conflict", "file_raw_new",
                          "file_raw_conflict", "all_new" } do
    f[name] = median(f[name])
    out[#out + 1] = string.format("figure %s_ns %.1f", name, f[name])
  end
  for _, v in ipairs { "resv", "into", "raw", "file", "file_raw" } do
    out[#out + 1] = string.format("figure %s_new_ratio %.3f", v, f.dict_new / f[v .. "_new"])
    out[#out + 1] = string.format("figure %s_conflict_ratio %.3f", v,
                                  f.dict_conflict / f[v .. "_conflict"])
  end
  out[#out + 1] = string.format("figure all_over_reserve %.3f", median(ratios))
  out[#out + 1] = string.format("figure all_over_reserve_min %.3f", ratios[1])
  out[#out + 1] = string.format("figure all_over_reserve_max %.3f", ratios[#ratios])
  ngx.say(table.concat(out, "\n"))
end

return _M

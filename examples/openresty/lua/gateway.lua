-- gateway: unique sign-ups at the edge, with resv.
--
-- POST /signup takes an e-mail address and a user name (a JSON object or a
-- form) and, for a new owner (a fresh id per request):
--
--   1. reserves the e-mail and the user name together (reserve_all:
--      both pending for ttl_ms, or neither);
--   2. asks the account service (a subrequest to /_account) to create the
--      account;
--   3. confirms both when the account exists (confirm_all), or abandons
--      them when the service failed (abandon_all), so the values are free
--      again at once.
--
-- Answers are JSON: 201 with the owner id; 409 naming the field whose value
-- is taken; 400 for a bad body; 502 when the account service failed; 503
-- when the store failed (never 201 unless both values are confirmed for
-- this owner).
--
-- The store is opened in init_worker (resv.ngx.open_in_worker: never
-- before nginx forks its workers, a MongoDB client must not cross fork()),
-- and a store that did not open (tried again until it opens), or a call
-- that failed, answers 503 (resv.ngx.unavailable). Every resv call yields
-- the request's coroutine while the store works; the worker serves other
-- requests meanwhile (lua/resv/ngx.lua).
local resv_ngx = require "resv.ngx"
local json = require "dkjson"

local ngx = ngx
local type = type
local tostring = tostring
local str_lower = string.lower

local MAX_FIELD = 254 -- bytes, the longest e-mail address SMTP allows

local _M = {}

local conf       -- the options given to init_worker
local signups = 0 -- sign-ups under way in this worker, for /health

local function reply(status, body)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.say(json.encode(body))
end

-- Opens the worker's store (resv.ngx.open_in_worker: after the fork, and
-- each worker's counters published for /metrics through the
-- lua_shared_dict resv_metrics). Runs in init_worker_by_lua*.
-- opts: store (resv.open's options), context, aggregate, ttl_ms, wait
-- (the waiting mechanism of resv.ngx; "" or nil: its default).
function _M.init_worker(opts)
  conf = opts
  if opts.wait and opts.wait ~= "" then
    assert(resv_ngx.use(opts.wait))
  end
  local store_opts = {}
  for k, v in pairs(opts.store or {}) do
    store_opts[k] = v
  end
  if store_opts.uri == "" then
    store_opts.uri = nil -- the in-memory store
  end
  if store_opts.path == "" then
    store_opts.path = nil -- not the file store
  end
  if store_opts.sync == "" then
    store_opts.sync = nil -- the file store's default
  end
  resv_ngx.open_in_worker(store_opts)
end

-- The worker's aggregate type, or nil, err.
local function worker_users()
  return resv_ngx.type(conf.context or "shop", conf.aggregate or "user")
end

-- GET /metrics: every worker's counters, in the Prometheus text format,
-- with a worker label (sum without (worker) (...) adds them up).
function _M.metrics()
  return resv_ngx.serve_metrics()
end

-- The request's body as a table, or nil, why.
local function read_body()
  ngx.req.read_body()
  local content_type = ngx.var.content_type or ""
  if content_type:find("json", 1, true) then
    local data = ngx.req.get_body_data()
    if not data then
      return nil, "empty or oversized body"
    end
    local body, _, err = json.decode(data, 1, nil)
    if type(body) ~= "table" then
      return nil, "bad JSON: " .. tostring(err or "not an object")
    end
    return body
  end
  local args, err = ngx.req.get_post_args(16)
  if not args then
    return nil, "bad form: " .. tostring(err)
  end
  return args
end

local function field(body, name)
  local v = body[name]
  if type(v) ~= "string" or v == "" then
    return nil, name .. " is missing"
  end
  if #v > MAX_FIELD then
    return nil, name .. " is longer than " .. MAX_FIELD .. " bytes"
  end
  return v
end

-- 409 naming the first field whose key another owner holds.
local function taken(fields, r)
  for i = 1, #fields do
    local k = r.keys[i]
    if k.status == "conflict" then
      return reply(409, { error = "taken", field = fields[i][1], value = fields[i][2],
                          state = k.state })
    end
  end
  return reply(409, { error = "taken" })
end

local function signup()
  local users, err = worker_users()
  if not users then
    return resv_ngx.unavailable(err, "not open")
  end
  local body
  body, err = read_body()
  if not body then
    return reply(400, { error = err })
  end
  local email, username
  email, err = field(body, "email")
  if not email then return reply(400, { error = err }) end
  username, err = field(body, "username")
  if not username then return reply(400, { error = err }) end

  -- A fresh owner per request; the attempt names this request.
  local attempt = ngx.var.request_id
  local owner = { id = "user-" .. attempt }
  local ttl = conf.ttl_ms or 30000
  -- E-mail addresses and user names are unique without regard to case.
  -- Both are held, or neither: one reserve_all.
  local fields = { { "email", email }, { "username", username } }
  local keys = { { namespace = "email", key = str_lower(email) },
                 { namespace = "username", key = str_lower(username) } }
  local r
  r, err = users:reserve_all(keys, owner, attempt, ttl)
  if not r then
    return resv_ngx.unavailable(err, "reserve_all")
  end
  if r.status == "conflict" then
    return taken(fields, r)
  end

  local res = ngx.location.capture("/_account", {
    method = ngx.HTTP_POST,
    body = json.encode { id = owner.id, email = email, username = username },
  })
  if res.status ~= 201 then
    -- Best effort: what this fails to let go of expires after ttl_ms.
    local _, aerr = users:abandon_all(keys, owner, attempt)
    if aerr then ngx.log(ngx.WARN, "resv: abandon_all failed: ", aerr) end
    return reply(502, { error = "account service failed", status = res.status })
  end

  -- The account exists: its creation is the owner's first fact (version 1).
  r, err = users:confirm_all(keys, owner, 1)
  if not r then
    return resv_ngx.unavailable(err, "confirm_all")
  end
  if r.status ~= "confirmed" then
    -- Our pending reservation expired and someone took the value.
    return taken(fields, r)
  end
  return reply(201, { id = owner.id, email = email, username = username })
end

function _M.signup()
  signups = signups + 1
  local ok, err = pcall(signup)
  signups = signups - 1
  if not ok then
    error(err, 0)
  end
end

-- The worker's aggregate type (nil when the store is not open), for the
-- benchmarks in bench/.
function _M.users()
  return (worker_users())
end

-- Answers at once, from the same worker: proof that waiting calls do not
-- block it.
function _M.health()
  ngx.header["Content-Type"] = "application/json"
  ngx.say(json.encode { ok = worker_users() ~= nil, pid = ngx.worker.pid(),
                        signups = signups, wait = resv_ngx.mechanism() })
end

return _M

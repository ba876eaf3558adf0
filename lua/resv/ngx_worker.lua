-- resv.ngx's helpers for an nginx.conf: the worker's store, a 503 when it
-- is not there, and every worker's counters at one /metrics. resv.ngx
-- hands these out (resv.ngx.open_in_worker, ...) and loads this file on
-- their first use, so the threads of nginx's pool, which load resv.ngx to
-- wait, never load it.
--
--   init_worker_by_lua_block { require("resv.ngx").open_in_worker { path = "/var/lib/resv" } }
--   location = /metrics { content_by_lua_block { require("resv.ngx").serve_metrics() } }
--   -- a handler:
--   local users, err = resv_ngx.type("shop", "user")
--   if not users then return resv_ngx.unavailable(err) end
--
-- Counters across workers: each worker puts its own store:stats() into a
-- lua_shared_dict (default resv_metrics) every `every` seconds, under
-- "worker:<ngx.worker.id()>", kept for max(5, 5 * every) seconds; the
-- worker that serves /metrics puts its own fresh ones first, then renders
-- every worker's listed in the dict, each with its worker label
-- (resv.metrics.render_many). A worker that nginx starts again in place of
-- one that died has the same id: its first publication, at init_worker,
-- replaces the dead one's; a worker that is gone for good drops out once
-- its last publication expires; a worker that is exiting (reload, quit)
-- publishes no more, so the new one with its id is the one listed.
--
-- The dict holds text, not Lua: each publication is one "path value" line
-- per number of metrics.portable(stats) (calls.reserve.reserved 10), which
-- decode() reads back without evaluating anything.
local metrics = require "resv.metrics"

local type = type
local pairs = pairs
local ipairs = ipairs
local error = error
local tostring = tostring
local tonumber = tonumber
local require = require
local rawget = rawget
local concat = table.concat
local sort = table.sort
local format = string.format
local gmatch = string.gmatch
local gsub = string.gsub
local sub = string.sub
local max = math.max
local min = math.min

local ngx = rawget(_G, "ngx")

local DICT = "resv_metrics"
local PREFIX = "worker:"
local EVERY = 1  -- seconds between a worker's publications
local KEEP = 5   -- publications' worth a listing stays
local RETRY_FIRST = 1 -- seconds before a store that did not open is tried again
local RETRY_MOST = 30 -- the longest wait between two tries

local _M = {}

local store         -- the worker's store (open_in_worker), or nil
local store_err     -- why it is not there
local publishing    -- the dict name this worker publishes into, once started

---------------------------------------------------------------------------
-- the worker's store

-- Tries resv.open(options) once; on success it is the worker's store, and
-- its counters go into dict (when given) every `every` seconds.
local function try_open(options, dict, every)
  local s, err = require("resv").open(options)
  if not s then
    store_err = err
    return nil, err
  end
  store, store_err = s, nil
  ngx.log(ngx.INFO, "resv: ", tostring(s), ", waiting by ", require("resv.ngx").mechanism())
  if dict then
    _M.publish_metrics(s, { dict = dict, every = every })
  end
  return s
end

-- Whether an open that failed with err may open later: every failure but
-- an invalid option. A path the store cannot use yet is tried again: its
-- parent not made or mounted yet, a directory not the worker's to write
-- (invalid: path: ...), which an operator may fix without a reload.
local function tried_again(err)
  return sub(err, 1, 8) ~= "invalid:" or sub(err, 1, 14) == "invalid: path:"
end

-- A store that did not open is tried again from a timer, after `delay`
-- seconds, then twice as long each time up to RETRY_MOST, until it opens
-- or the worker exits (a reload, a quit). A failure is logged when its
-- error differs from the one before; the open that succeeds is logged.
local function retry(delay, options, dict, every, last_err)
  local ok, terr = ngx.timer.at(delay, function(premature)
    if premature or store then
      return
    end
    local s, err = try_open(options, dict, every)
    if s then
      ngx.log(ngx.WARN, "resv: opened the store, which did not open before: ", last_err)
      return
    end
    if err ~= last_err then
      ngx.log(ngx.ERR, "resv: cannot open the store: ", err)
    end
    retry(min(2 * delay, RETRY_MOST), options, dict, every, err)
  end)
  if not ok then
    ngx.log(ngx.ERR, "resv: no timer to open the store again: ", terr)
  end
end

-- Opens this worker's store with resv.open(options), in init_worker_by_lua*
-- (after the fork). opts (optional): metrics = the lua_shared_dict to
-- publish this worker's counters into (default "resv_metrics" when nginx.conf
-- has it; false: none), every = seconds between publications (1), retry =
-- seconds before the first try again when it does not open (1; false:
-- never). Logs why when it cannot open; store() and type() then answer that
-- error, until a try again opens it (every failure but invalid options is
-- tried again, see tried_again: a directory not there yet or not the
-- worker's to write, a damaged store until resv recover moves it aside, a
-- writer holding the gate past the deadline).
-- Returns the store, or nil, err.
function _M.open_in_worker(options, opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("resv.ngx.open_in_worker: opts must be a table", 2)
  end
  local dict = opts.metrics
  if dict == nil and ngx.shared and ngx.shared[DICT] then
    dict = DICT
  end
  if dict and not (ngx.shared and ngx.shared[dict]) then
    error("resv.ngx.open_in_worker: nginx.conf has no `lua_shared_dict " .. tostring(dict)
          .. " 1m;` for metrics", 2)
  end
  local delay = opts.retry
  if delay == nil then
    delay = RETRY_FIRST
  end
  if delay ~= false and (type(delay) ~= "number" or delay <= 0) then
    error("resv.ngx.open_in_worker: retry must be a number of seconds > 0 or false", 2)
  end
  local s, err = try_open(options, dict, opts.every)
  if s then
    return s
  end
  ngx.log(ngx.ERR, "resv: cannot open the store: ", err)
  if delay and tried_again(err) then
    local copy = options -- as it is now: the caller may change its table later
    if type(options) == "table" then
      copy = {}
      for k, v in pairs(options) do
        copy[k] = v
      end
    end
    retry(delay, copy, dict, opts.every, err)
  end
  return nil, err
end

-- This worker's store, or nil, err: why open_in_worker could not open it,
-- or that it was never called in this Lua VM.
function _M.store()
  if store then
    return store
  end
  return nil, store_err or "closed: no store opened in this Lua VM (call "
    .. "resv.ngx.open_in_worker in init_worker_by_lua*; with lua_code_cache off "
    .. "each request has a Lua VM of its own: open the store on first use)"
end

-- The worker's store's type (store:type: the same object each time), or
-- nil, err when the store is not there or the names are invalid.
function _M.type(context, aggregate)
  local s, err = _M.store()
  if not s then
    return nil, err
  end
  return s:type(context, aggregate)
end

local function json_string(s)
  return '"' .. gsub(tostring(s), '[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return format("\\u%04x", c:byte())
  end) .. '"'
end

-- Answers the request 503 with a JSON body { error = "store unavailable",
-- detail = "<what>: <err>" } and logs the same at ERR, then ends the
-- request (ngx.exit): for a call that failed (nil, err) or a store that did
-- not open. Never 2xx on an error.
function _M.unavailable(err, what)
  local detail = what and (what .. ": " .. tostring(err)) or tostring(err)
  ngx.log(ngx.ERR, "resv: ", detail)
  ngx.status = 503
  ngx.header["Content-Type"] = "application/json"
  ngx.say('{"error":"store unavailable","detail":', json_string(detail), '}')
  return ngx.exit(ngx.HTTP_OK)
end

---------------------------------------------------------------------------
-- metrics across workers

-- The lines of a portable stats table: "a.b.c value" for each number.
local function encode(t, path, out)
  for k, v in pairs(t) do
    local p = path .. tostring(k)
    if type(v) == "table" then
      encode(v, p .. ".", out)
    elseif type(v) == "number" then
      out[#out + 1] = p .. " " .. format("%.17g", v)
    end
  end
  return out
end
_M._encode = function(st) return concat(encode(metrics.portable(st), "", {}), "\n") end

-- A publication back to a portable stats table (nil for a malformed one).
local function decode(text)
  local st = {}
  for path, value in gmatch(text, "([^ \n]+) ([^\n]+)") do
    local v = tonumber(value)
    if v == nil then return nil end
    local t, last = st, nil
    for part in gmatch(path, "[^.]+") do
      if last ~= nil then
        local child = t[last]
        if child == nil then
          child = {}
          t[last] = child
        elseif type(child) ~= "table" then
          return nil
        end
        t = child
      end
      last = tonumber(part) or part
    end
    if last == nil then return nil end
    t[last] = v
  end
  -- An op, or a whole table, without a count above zero has no line.
  for _, name in ipairs { "calls", "errors", "latency" } do
    if st[name] == nil then
      st[name] = {}
    elseif type(st[name]) ~= "table" then
      return nil
    end
  end
  return st
end
_M._decode = decode

local function dict_of(name, who)
  local dict = ngx.shared and ngx.shared[name]
  if not dict then
    error("resv.ngx." .. who .. ": nginx.conf has no `lua_shared_dict " .. tostring(name)
          .. " 1m;`", 3)
  end
  return dict
end

-- Puts store's counters into dict under this worker's id; false when the
-- worker is exiting or the store cannot give them.
local function publish(store_, dict, ttl)
  if ngx.worker.exiting and ngx.worker.exiting() then
    return false
  end
  local st = store_:stats()
  if not st then
    return false
  end
  local ok, err = dict:set(PREFIX .. ngx.worker.id(), _M._encode(st), ttl)
  if not ok then
    ngx.log(ngx.ERR, "resv: cannot publish the counters: ", err)
  end
  return ok
end

local function settings(opts, who)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("resv.ngx." .. who .. ": opts must be a table", 3)
  end
  local every = opts.every or EVERY
  if type(every) ~= "number" or every <= 0 then
    error("resv.ngx." .. who .. ": every must be a number of seconds > 0", 3)
  end
  local name = opts.dict or DICT
  return name, dict_of(name, who), every, max(KEEP, KEEP * every)
end

-- In init_worker_by_lua*: this worker puts store's counters into the
-- lua_shared_dict opts.dict ("resv_metrics") now and every opts.every
-- seconds (1), for serve_metrics in any worker. Once per worker; true, or
-- nil, err when nginx gives no timer.
function _M.publish_metrics(s, opts)
  local name, dict, every, ttl = settings(opts, "publish_metrics")
  if publishing then
    return true
  end
  publish(s, dict, ttl)
  local ok, err = ngx.timer.every(every, function(premature)
    if not premature then publish(s, dict, ttl) end
  end)
  if not ok then
    ngx.log(ngx.ERR, "resv: no timer to publish the counters: ", err)
    return nil, err
  end
  publishing = name
  return true
end

-- The Prometheus text of every worker's counters listed in dict, this
-- worker's fresh from store_ (nil: only what the others published).
local function gather(store_, dict, ttl)
  if store_ then
    publish(store_, dict, ttl)
  end
  local list = {}
  local ids = {}
  for _, key in ipairs(dict:get_keys(0)) do
    local id = sub(key, 1, #PREFIX) == PREFIX and tonumber(sub(key, #PREFIX + 1))
    if id then ids[#ids + 1] = id end
  end
  sort(ids)
  for _, id in ipairs(ids) do
    local text = dict:get(PREFIX .. id)
    local st = text and decode(text)
    if st then
      list[#list + 1] = { labels = { worker = tostring(id) }, stats = st }
    end
  end
  return metrics.render_many(list)
end
_M._gather = gather

-- In a content handler (location = /metrics): answers every worker's
-- counters in the Prometheus text format, each sample with a worker label
-- (sum without (worker) (...) adds them up). This worker's are fresh, the
-- others' at most opts.every seconds old. s: the store (nil: the worker's,
-- open_in_worker's); opts: dict, every, as publish_metrics.
function _M.serve_metrics(s, opts)
  local _, dict, _, ttl = settings(opts, "serve_metrics")
  s = s or store
  local text = gather(s, dict, ttl)
  ngx.header["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
  ngx.print(text)
  return true
end

-- Replaces the ngx table this module uses, and forgets the worker's store.
-- For tests outside nginx.
function _M._use(fake_ngx)
  ngx = fake_ngx
  store, store_err, publishing = nil, nil, nil
end

return _M

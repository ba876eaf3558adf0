-- resv: unique-key reservations on MongoDB, in a file or in memory, for
-- LuaJIT.
--
-- A thin FFI binding over libresv (csrc/resv.h). This file opens stores
-- and hands out their types; resv.type makes the calls and their answers,
-- resv.sched and resv.ngx wait for them without blocking the host, and
-- resv.base holds what they share.
--
-- Answers are plain tables (docs/design.md section 9); errors are `nil, "<code>:
-- <message>"` (docs/design.md section 8). Calling a method on the wrong object is a
-- programmer's mistake and raises.
local ffi = require "ffi"
local jit = require "jit"
local C = require "resv.ffi"
local base = require "resv.base"
local sched = require "resv.sched"
local rtype = require "resv.type"
local host = require "resv.host"

local error = error
local type = type
local pairs = pairs
local tostring = tostring
local tonumber = tonumber
local setmetatable = setmetatable
local getmetatable = getmetatable
local ffi_new = ffi.new
local ffi_gc = ffi.gc
local ffi_string = ffi.string
local str_find = string.find

local resv_store_open = C.resv_store_open
local resv_store_shutdown = C.resv_store_shutdown
local resv_store_stop = C.resv_store_stop
local resv_store_close = C.resv_store_close
local resv_store_set_time = C.resv_store_set_time
local resv_store_use_system_time = C.resv_store_use_system_time
local resv_store_now = C.resv_store_now
local resv_store_is_sharded = C.resv_store_is_sharded
local resv_store_runs_inline = C.resv_store_runs_inline
local resv_store_may_answer_inline = C.resv_store_may_answer_inline
local resv_store_describe = C.resv_store_describe
local resv_store_type = C.resv_store_type
local resv_store_stats = C.resv_store_stats
local resv_stats_bound = C.resv_stats_bound

local error_string = base.error_string
local invalid = base.invalid
local expected = base.expected
local check_integer = base.check_integer
local exact = base.exact
local err_buf = base.err_buf
local new_type = rtype.new
local MAX_INTEGER = base.MAX_INTEGER
local MAX_INT32 = 2 ^ 31 - 1

local DESCRIBE_SIZE = 256
local describe_buf = ffi_new("char[?]", DESCRIBE_SIZE)

local _M = {
  _VERSION = ffi_string(C.resv_version()),
  spawn = sched.spawn,
  poll = sched.poll,
  run = sched.run,
  fd = sched.fd,
  timeout = sched.timeout,
  pending = sched.pending,
}

local Store = {}
Store.__index = Store

---------------------------------------------------------------------------
-- Stores

local function check_store(self, method)
  if getmetatable(self) ~= Store then
    error("resv: " .. method .. " must be called on a store "
          .. "(resv.open(...)), as store:" .. method .. "(...)", 3)
  end
  return self.handle
end

function Store:type(context, aggregate)
  local h = check_store(self, "type")
  if type(context) ~= "string" then
    return nil, expected("context", "a string", context)
  end
  if type(aggregate) ~= "string" then
    return nil, expected("aggregate", "a string", aggregate)
  end
  local id = context .. "\0" .. aggregate
  local t = self.types[id]
  if t then
    return t
  end
  local th = resv_store_type(h, context, #context, aggregate, #aggregate,
                             err_buf)
  if th == nil then
    return nil, error_string(err_buf)
  end
  -- The C handle belongs to the store; the reference to the store keeps
  -- it from being collected while the type is in use.
  t = new_type(th, self, resv_store_runs_inline(h), resv_store_may_answer_inline(h))
  self.types[id] = t
  return t
end

-- The types the store holds (resv_store_types; a tool's call: it blocks
-- for one round trip): an array of { context, aggregate, collection },
-- sorted by collection; or nil, err (the memory store: "invalid").
local names_buf = ffi_gc(ffi_new("resv_type_names_t"), C.resv_type_names_clear)
function Store:list_types()
  local h = check_store(self, "list_types")
  if not C.resv_store_types(h, names_buf, err_buf) then
    return nil, error_string(err_buf)
  end
  local list = {}
  for i = 0, tonumber(names_buf.count) - 1 do
    local n = names_buf.names[i]
    list[i + 1] = {
      context = ffi_string(n.context.ptr, n.context.len),
      aggregate = ffi_string(n.aggregate.ptr, n.aggregate.len),
      collection = ffi_string(n.collection.ptr, n.collection.len),
    }
  end
  C.resv_type_names_clear(names_buf)
  return list
end

-- Freezes the store's clock at ms (epoch milliseconds); nil: system clock.
function Store:set_time(ms)
  local h = check_store(self, "set_time")
  if ms == nil then
    resv_store_use_system_time(h)
    return true
  end
  local n, err = check_integer("ms", ms, -MAX_INTEGER, MAX_INTEGER,
                               "an integer (epoch milliseconds)", true)
  if not n then return nil, err end
  resv_store_set_time(h, n)
  return true
end

-- The store's clock, epoch milliseconds.
function Store:now()
  local h = check_store(self, "now")
  return exact(resv_store_now(h))
end

function Store:is_sharded()
  local h = check_store(self, "is_sharded")
  return resv_store_is_sharded(h)
end

-- True where the running code must not block: in nginx (any phase), in
-- Tarantool, in a coroutine of resv.spawn.
local host_waiter = host.waiter
local function must_not_block()
  return host_waiter.present() or sched.in_spawned()
end

-- Stops the store: calls still queued answer "closed", later calls too.
-- Where the code must not block, it returns at once and a C thread waits
-- for the calls in flight (each within its deadline); elsewhere it
-- returns once they ended and the connections are closed. The memory
-- goes when the store and its types are collected, so a coroutine still
-- holding a type never touches freed memory.
function Store:close()
  local h = check_store(self, "close")
  if must_not_block() then
    resv_store_stop(h)
  else
    resv_store_shutdown(h)
  end
  self.closed = true
  return true
end

-- The names of resv_stats_t's rows and columns (docs/design.md section 13).
local OP_NAMES = { "reserve", "confirm", "abandon", "release", "get", "sweep",
  "reserve_all", "confirm_all", "abandon_all" }
local function names_of(name_of, n)
  local t = {}
  for i = 0, n - 1 do t[i] = ffi_string(name_of(i)) end
  return t
end
local STATUS_NAMES = names_of(C.resv_status_name, C.RESV_STATS_STATUSES)
local CODE_NAMES = names_of(C.resv_code_name, C.RESV_STATS_CODES)
local BOUNDS = {}
for i = 0, C.RESV_STATS_BUCKETS - 1 do BOUNDS[i + 1] = resv_stats_bound(i) end

local stats_buf = ffi_new("resv_stats_t")

-- The store's counters since open as a plain table:
--   calls[op][status], errors[op][code]  (only the counts above zero)
--   latency[op] = { count, sum (seconds), buckets = { { le, count }, ... } }
--     (cumulative; the last le is math.huge)
--   duplicate_key_retries, setup_failures, slow_calls, slow_ms,
--   jobs_waiting, jobs_running, entries and bytes (nil for MongoDB),
--   clock_skew_ms and clock_skew_error_ms (MongoDB, once the driver's
--   monitor has said hello: the server's clock minus this host's, known to
--   within the error; nil before and for the embedded stores).
-- Returns nil, err only for a store used after fork().
function Store:stats()
  local h = check_store(self, "stats")
  if not resv_store_stats(h, stats_buf, err_buf) then
    return nil, error_string(err_buf)
  end
  local st = stats_buf
  local calls, errors, latency = {}, {}, {}
  for op = 1, #OP_NAMES do
    local name = OP_NAMES[op]
    local c, e = {}, {}
    for k = 0, C.RESV_STATS_STATUSES - 1 do
      local n = tonumber(st.calls[op][k])
      if n > 0 then c[STATUS_NAMES[k]] = n end
    end
    for k = 0, C.RESV_STATS_CODES - 1 do
      local n = tonumber(st.errors[op][k])
      if n > 0 then e[CODE_NAMES[k]] = n end
    end
    calls[name], errors[name] = c, e
    local buckets = {}
    for b = 1, #BOUNDS do
      buckets[b] = { le = BOUNDS[b], count = tonumber(st.latency[op][b - 1]) }
    end
    latency[name] = { count = buckets[#buckets].count, sum = st.latency_sum[op],
                      buckets = buckets }
  end
  local entries, bytes = tonumber(st.entries), tonumber(st.bytes)
  local skew_error = tonumber(st.clock_skew_error_ms)
  return {
    calls = calls, errors = errors, latency = latency,
    duplicate_key_retries = tonumber(st.duplicate_key_retries),
    setup_failures = tonumber(st.setup_failures),
    slow_calls = tonumber(st.slow_calls),
    slow_ms = tonumber(st.slow_ms),
    jobs_waiting = tonumber(st.jobs_waiting),
    jobs_running = tonumber(st.jobs_running),
    entries = entries >= 0 and entries or nil,
    bytes = bytes >= 0 and bytes or nil,
    clock_skew_ms = skew_error >= 0 and tonumber(st.clock_skew_ms) or nil,
    clock_skew_error_ms = skew_error >= 0 and skew_error or nil,
  }
end

-- resv.metrics(store [, labels]): the Prometheus text format (resv.metrics).
function _M.metrics(store, labels)
  return require("resv.metrics").render(store, labels)
end

function Store:__tostring()
  resv_store_describe(self.handle, describe_buf, DESCRIBE_SIZE)
  return "resv.store: " .. ffi_string(describe_buf)
end

---------------------------------------------------------------------------
-- Opening

local SHARDING = { auto = C.RESV_SHARDING_AUTO, off = C.RESV_SHARDING_OFF }
local SYNC = { process = C.RESV_SYNC_PROCESS, disk = C.RESV_SYNC_DISK }
local LOG_LEVEL = { error = C.RESV_LOG_ERROR, warning = C.RESV_LOG_WARNING,
                    info = C.RESV_LOG_INFO, debug = C.RESV_LOG_DEBUG }
local OS_CRASH = { refuse = C.RESV_OS_CRASH_REFUSE, reset = C.RESV_OS_CRASH_RESET }

-- The number of nginx workers when running inside OpenResty, else nil.
local function ngx_workers()
  local ngx = rawget(_G, "ngx")
  local worker = ngx and ngx.worker
  return worker and worker.count and worker.count() or nil
end

-- True in nginx's init_by_lua* (the master, before it forks its workers).
local function in_ngx_init()
  local ngx = rawget(_G, "ngx")
  local get_phase = ngx and ngx.get_phase
  return get_phase ~= nil and get_phase() == "init"
end

local function check_c_string(what, s)
  if type(s) ~= "string" then
    return nil, expected(what, "a string", s)
  end
  if str_find(s, "\0", 1, true) then
    return nil, invalid(what, "contains a NUL byte")
  end
  return s
end

-- The checks of the options, each check(o, name, v, keep, values) for an
-- option given (v not nil): it sets o's field, or returns an error. A
-- string o points to goes into keep.

-- A string; nonempty: "" is refused.
local function c_string(nonempty)
  return function(o, name, v, keep)
    local s, err = check_c_string(name, v)
    if not s then return err end
    if nonempty and s == "" then return invalid(name, "empty") end
    keep[name] = s
    o[name] = s
  end
end

-- The file store's directory, which excludes uri.
local fill_c_path = c_string(true)
local function fill_path(o, name, v, keep, values)
  local err = fill_c_path(o, name, v, keep)
  if err then return err end
  if values.uri ~= nil then
    return "invalid: path and uri: give one of them, not both"
  end
end

-- One of the names of map, which gives its C value; words lists them.
local function enum(map, words)
  return function(o, name, v)
    local value = map[v]
    if value == nil then
      return invalid(name, "expected " .. words .. ", got " .. tostring(v))
    end
    o[name] = value
  end
end

local function fill_boolean(o, name, v)
  if type(v) ~= "boolean" then
    return expected(name, "a boolean", v)
  end
  o[name] = v and 1 or 0
end

-- "majority" or a count of nodes. C takes 0 for "the default", so 0
-- (w: 0) is refused here.
local function fill_write_concern(o, name, v)
  if v == "majority" then
    o[name] = C.RESV_WRITE_MAJORITY
    return
  end
  local n, err = check_integer(name, v, 1, MAX_INT32,
                               '"majority" or an integer from 1 to ' .. MAX_INT32)
  if not n then return err end
  o[name] = n
end

-- An int64_t field, exact in a Lua number; resv_store_open checks the range.
local function fill_wide(o, name, v)
  local n, err = check_integer(name, v, -2 ^ 53, 2 ^ 53, "an integer")
  if not n then return err end
  o[name] = n
end

-- An int32_t field; resv_store_open checks the range.
local function fill_int32(o, name, v)
  local n, err = check_integer(name, v, 1, MAX_INT32, "an integer from 1 to " .. MAX_INT32)
  if not n then return err end
  o[name] = n
end

-- The memory store keeps values unique per process: refused in an nginx
-- of several workers unless per_process says that is meant.
local function check_workers(values)
  if values.uri == nil and values.path == nil and not values.per_process then
    local workers = ngx_workers()
    if workers and workers > 1 then
      return "invalid: the memory store keeps values unique per process, and "
        .. "nginx runs " .. workers .. " workers: give path (the file store, "
        .. "shared by every worker) or uri (MongoDB), or per_process = true"
    end
  end
end

-- The options in the order they are checked (the first error is the one
-- returned), each with its check; an entry without a name checks the
-- options together (check(values)).
local CHECKS = {
  { "uri", c_string(false) },
  { "database", c_string(true) },
  { "sharding", enum(SHARDING, '"auto" or "off"') },
  { "write_concern", fill_write_concern },
  { "path", fill_path },
  { "sync", enum(SYNC, '"process" or "disk"') },
  { "log_level", enum(LOG_LEVEL, '"error", "warning", "info" or "debug"') },
  { "on_os_crash", enum(OS_CRASH, '"refuse" or "reset"') },
  { "per_process", fill_boolean },
  { "check", fill_boolean },
  { "no_create", fill_boolean },
  { false, check_workers },
  { "map_size", fill_wide },
  { "sweep_grace_ms", fill_wide },
  { "slow_ms", fill_wide },
  { "threads", fill_int32 },
  { "queue", fill_int32 },
  { "timeout_ms", fill_int32 },
  { "max_string", fill_int32 },
  { "max_holds", fill_int32 },
  { "max_keys", fill_int32 },
}
local OPTIONS = {}
for i = 1, #CHECKS do
  local name = CHECKS[i][1]
  if name then OPTIONS[name] = true end
end

-- Fills the resv_options_t o from the table opts, reading each field once.
-- The strings o points to are put into keep, which the caller holds until
-- C is done with them. Returns nil, or an error.
local function fill_options(o, opts, keep)
  for name in pairs(opts) do
    if not OPTIONS[name] then
      return "invalid: unknown option " .. tostring(name)
    end
  end
  local values = {}
  for name in pairs(OPTIONS) do
    values[name] = opts[name]
  end
  for i = 1, #CHECKS do
    local name, check = CHECKS[i][1], CHECKS[i][2]
    local err
    if not name then
      err = check(values)
    elseif values[name] ~= nil then
      err = check(o, name, values[name], keep, values)
    end
    if err then return err end
  end
  return nil
end

-- Opens a store; see the README for the options. Returns the store or
-- nil, "<code>: <message>".
function _M.open(opts)
  if opts == nil then
    opts = {}
  elseif type(opts) ~= "table" then
    return nil, expected("options", "a table", opts)
  end
  local o = ffi_new("resv_options_t")
  local keep = {}
  local err = fill_options(o, opts, keep)
  if err then return nil, err end
  -- A store's threads and connections stay in the process that opened it:
  -- the workers nginx forks after init_by_lua* would each get a dead copy.
  if in_ngx_init() then
    return nil, "invalid: a store cannot be opened in init_by_lua*: nginx forks "
      .. "its workers after it, and a store does not cross fork(); open it in "
      .. "init_worker_by_lua* (each worker opens its own)"
  end
  local h = resv_store_open(o, err_buf)
  -- o points into the strings of keep: they must be alive until here. This
  -- function is never compiled (below), and in the interpreter a local's
  -- slot keeps its value alive while the frame runs.
  keep = nil
  if h == nil then
    return nil, error_string(err_buf)
  end
  if not resv_store_may_answer_inline(h) and host_waiter.check_pool then
    host_waiter.check_pool() -- its calls will wait: can the host wait for them?
  end
  return setmetatable({
    handle = ffi_gc(h, resv_store_close),
    types = {},
    closed = false,
  }, Store)
end
-- A compiled trace may drop a local it no longer reads (its snapshots keep
-- only live slots), and with it the last reference to an option string.
jit.off(_M.open)

-- The file store in the directory path, refused at open as damaged (by a
-- crash of the OS, say): moves its files into a new sibling directory, so
-- that the next open starts empty. Returns that directory's name, false
-- when the store opens as it is (nothing moved), or nil, "<code>: <message>".
local recover_buf = ffi.new("char[?]", 4200)
function _M.recover(path)
  if type(path) ~= "string" or path == "" then
    error("resv.recover: path must be a non-empty string", 2)
  end
  local rc = C.resv_store_recover(path, recover_buf, 4200, err_buf)
  if rc < 0 then return nil, error_string(err_buf) end
  if rc == 0 then return false end
  return ffi_string(recover_buf)
end

return _M

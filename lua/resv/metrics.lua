-- resv.metrics: a store's counters (store:stats()) in the Prometheus text
-- exposition format (version 0.0.4), for a /metrics endpoint.
--
--   local text = resv.metrics(store [, labels])
--
-- labels: a table of extra labels put on every sample, e.g.
-- { worker = ngx.worker.id() } when each nginx worker serves its own
-- (Prometheus sums them with sum without (worker) (...)). Label values are
-- escaped as the format says; names must be valid label names (an invalid
-- one raises: a programmer's mistake).
--
-- The metrics, each with HELP and TYPE:
--   resv_calls_total{op,status}            counter: answered calls
--   resv_errors_total{op,code}             counter: failed calls
--   resv_call_duration_seconds{op}         histogram: _bucket{le}, _sum, _count
--   resv_duplicate_key_retries_total       counter (MongoDB)
--   resv_setup_failures_total              counter
--   resv_slow_calls_total                  counter: calls past slow_ms
--   resv_jobs_waiting, resv_jobs_running   gauges
--   resv_entries, resv_bytes               gauges (memory and file stores)
--   resv_clock_skew_seconds, resv_clock_skew_error_seconds
--                                          gauges (MongoDB, once measured):
--                                          server's clock minus this host's
--
-- Several stores (e.g. one per nginx worker, gathered through an
-- ngx.shared dict) render as one text with render_many, so that each
-- family's HELP and TYPE appear once and its samples stay together, as
-- the format requires; portable(stats) makes a stats table JSON-safe
-- (the buckets' bounds, +Inf among them, are left out and put back).
local type = type
local pairs = pairs
local ipairs = ipairs
local error = error
local tostring = tostring
local tonumber = tonumber
local concat = table.concat
local sort = table.sort
local format = string.format
local str_find = string.find
local gsub = string.gsub
local huge = math.huge
local C = require "resv.ffi"

local BOUNDS = {}
for i = 0, C.RESV_STATS_BUCKETS - 1 do BOUNDS[i + 1] = C.resv_stats_bound(i) end

local OPS = { "reserve", "confirm", "abandon", "release", "get", "sweep",
  "reserve_all", "confirm_all", "abandon_all" }
local FLOAT_FORMATS = { "%.15g", "%.16g" }

local _M = {}

local function escape(v)
  return (gsub(tostring(v), '[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

-- The extra labels as 'a="x",b="y"' in a stable order, or "".
local function label_text(labels)
  if labels == nil then return "" end
  if type(labels) ~= "table" then
    error("resv.metrics: labels must be a table", 3)
  end
  local names = {}
  for k in pairs(labels) do
    if type(k) ~= "string" or not str_find(k, "^[%a_][%w_]*$") or str_find(k, "^__") then
      error("resv.metrics: bad label name " .. tostring(k), 3)
    end
    names[#names + 1] = k
  end
  sort(names)
  local parts = {}
  for i = 1, #names do
    parts[i] = names[i] .. '="' .. escape(labels[names[i]]) .. '"'
  end
  return concat(parts, ",")
end

-- Prometheus floats: +Inf, integers without an exponent, others in the
-- shortest of 15, 16 and 17 significant digits that reads back as the
-- same double (1e-06, 0.1: as other exporters write them; 17 digits
-- always do).
local function number(v)
  if v == huge then return "+Inf" end
  if v == -huge then return "-Inf" end
  if v ~= v then return "NaN" end
  if v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
    return format("%d", v)
  end
  for _, f in ipairs(FLOAT_FORMATS) do
    local text = format(f, v)
    if tonumber(text) == v then return text end
  end
  return format("%.17g", v)
end
_M.number = number

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys)
  return keys
end

-- A copy of a stats table without non-finite numbers: each op's buckets
-- become an array of counts (their bounds are the library's).
function _M.portable(st)
  local latency = {}
  for op, h in pairs(st.latency) do
    local counts = {}
    for i, b in ipairs(h.buckets) do counts[i] = b.count end
    latency[op] = { count = h.count, sum = h.sum, buckets = counts }
  end
  local copy = {}
  for k, v in pairs(st) do copy[k] = v end
  copy.latency = latency
  return copy
end

-- The samples of each family: each(st, emit) calls emit(sample name,
-- label pairs, value) for the stats table st of one store.

local function calls_samples(st, emit)
  for _, op in ipairs(OPS) do
    local c = st.calls[op] or {}
    for _, status in ipairs(sorted_keys(c)) do
      emit("resv_calls_total", 'op="' .. op .. '",status="' .. status .. '"', c[status])
    end
  end
end

local function errors_samples(st, emit)
  for _, op in ipairs(OPS) do
    local e = st.errors[op] or {}
    for _, code in ipairs(sorted_keys(e)) do
      emit("resv_errors_total", 'op="' .. op .. '",code="' .. code .. '"', e[code])
    end
  end
end

local function latency_samples(st, emit)
  for _, op in ipairs(OPS) do
    local h = st.latency[op]
    if h then
      local o = 'op="' .. op .. '"'
      for i, b in ipairs(h.buckets) do
        local le, count = BOUNDS[i], b
        if type(b) == "table" then le, count = b.le, b.count end
        emit("resv_call_duration_seconds_bucket", o .. ',le="' .. number(le) .. '"', count)
      end
      emit("resv_call_duration_seconds_sum", o, h.sum)
      emit("resv_call_duration_seconds_count", o, h.count)
    end
  end
end

-- A field of every store (0 when absent).
local function scalar(key, name)
  return function(st, emit) emit(name, "", st[key] or 0) end
end

-- A field some stores have: only theirs.
local function gauge(key, name)
  return function(st, emit)
    if st[key] then emit(name, "", st[key]) end
  end
end

-- A field in ms some stores have, in seconds.
local function seconds(key, name)
  return function(st, emit)
    if st[key] then emit(name, "", st[key] / 1000) end
  end
end

-- The families in the order they are written: name, type, help, samples.
-- A family with `when` is written only when one store at least has that
-- field.
local FAMILIES = {
  { "resv_calls_total", "counter", "Calls answered, by operation and answer status.",
    calls_samples },
  { "resv_errors_total", "counter", "Calls that failed, by operation and error code.",
    errors_samples },
  { "resv_call_duration_seconds", "histogram",
    "Time from a call to its answer (the memory store observes one call in 256).",
    latency_samples },
  { "resv_duplicate_key_retries_total", "counter",
    "Upserts that met a duplicate key and read the key again (MongoDB).",
    scalar("duplicate_key_retries", "resv_duplicate_key_retries_total") },
  { "resv_setup_failures_total", "counter",
    "Set-ups of a type (collection, format record) that failed.",
    scalar("setup_failures", "resv_setup_failures_total") },
  { "resv_slow_calls_total", "counter", "Calls that took longer than slow_ms.",
    scalar("slow_calls", "resv_slow_calls_total") },
  { "resv_jobs_waiting", "gauge", "Jobs queued for a dispatcher thread.",
    scalar("jobs_waiting", "resv_jobs_waiting") },
  { "resv_jobs_running", "gauge", "Jobs a dispatcher thread is running.",
    scalar("jobs_running", "resv_jobs_running") },
  { "resv_entries", "gauge", "Reservations the store holds (memory and file stores).",
    gauge("entries", "resv_entries"), when = "entries" },
  { "resv_bytes", "gauge", "Bytes those reservations take (memory and file stores).",
    gauge("bytes", "resv_bytes"), when = "entries" },
  { "resv_clock_skew_seconds", "gauge",
    "The server's clock minus this host's at the driver's last hello (MongoDB).",
    seconds("clock_skew_ms", "resv_clock_skew_seconds"), when = "clock_skew_ms" },
  { "resv_clock_skew_error_seconds", "gauge",
    "How far off resv_clock_skew_seconds may be: half the hello's round trip.",
    seconds("clock_skew_error_ms", "resv_clock_skew_error_seconds"), when = "clock_skew_ms" },
}

-- True when one store of list at least has the field key.
local function any_has(list, key)
  for _, item in ipairs(list) do
    if item.stats[key] ~= nil then return true end
  end
  return false
end

-- Renders a list of { labels = {...} or nil, stats = store:stats() or
-- portable(...) } as one text. Raises on a bad labels table.
function _M.render_many(list)
  local out, n = {}, 0
  local function line(s)
    n = n + 1
    out[n] = s
  end
  local extras = {}
  for i, item in ipairs(list) do extras[i] = label_text(item.labels) end
  -- One family: HELP, TYPE, then each store's samples via each(st, emit).
  local function family(name, kind, help, each)
    line("# HELP " .. name .. " " .. help)
    line("# TYPE " .. name .. " " .. kind)
    for i, item in ipairs(list) do
      local extra = extras[i]
      each(item.stats, function(sample_name, pairs_text, value)
        local l = pairs_text
        if extra ~= "" then
          l = l ~= "" and (extra .. "," .. l) or extra
        end
        line(sample_name .. (l ~= "" and ("{" .. l .. "}") or "") .. " " .. number(value))
      end)
    end
  end
  for _, f in ipairs(FAMILIES) do
    if f.when == nil or any_has(list, f.when) then
      family(f[1], f[2], f[3], f[4])
    end
  end
  line("")
  return concat(out, "\n")
end

-- Renders store:stats() of store as text; raises on a bad labels table,
-- returns nil, err when the store cannot give its counters.
function _M.render(store, labels)
  label_text(labels) -- a bad one raises here, at the caller's level
  local st, err = store:stats()
  if not st then return nil, err end
  return _M.render_many { { labels = labels, stats = st } }
end

return _M

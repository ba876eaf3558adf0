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
local type = type
local pairs = pairs
local ipairs = ipairs
local error = error
local tostring = tostring
local concat = table.concat
local sort = table.sort
local format = string.format
local str_find = string.find
local gsub = string.gsub
local huge = math.huge

local OPS = { "reserve", "confirm", "abandon", "release", "get", "sweep" }

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

-- Prometheus floats: +Inf, integers without an exponent.
local function number(v)
  if v == huge then return "+Inf" end
  if v == -huge then return "-Inf" end
  if v ~= v then return "NaN" end
  if v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
    return format("%d", v)
  end
  return format("%.17g", v)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys)
  return keys
end

-- Renders store:stats() of store as text; raises on a bad labels table,
-- returns nil, err when the store cannot give its counters.
function _M.render(store, labels)
  local extra = label_text(labels)
  local st, err = store:stats()
  if not st then return nil, err end
  local out, n = {}, 0
  local function line(s)
    n = n + 1
    out[n] = s
  end
  -- A sample: name{extra,labels} value.
  local function sample(name, pairs_text, value)
    local l = pairs_text
    if extra ~= "" then
      l = l ~= "" and (extra .. "," .. l) or extra
    end
    line(name .. (l ~= "" and ("{" .. l .. "}") or "") .. " " .. number(value))
  end
  local function header(name, kind, help)
    line("# HELP " .. name .. " " .. help)
    line("# TYPE " .. name .. " " .. kind)
  end

  header("resv_calls_total", "counter", "Calls answered, by operation and answer status.")
  for _, op in ipairs(OPS) do
    local c = st.calls[op]
    for _, status in ipairs(sorted_keys(c)) do
      sample("resv_calls_total", 'op="' .. op .. '",status="' .. status .. '"', c[status])
    end
  end
  header("resv_errors_total", "counter", "Calls that failed, by operation and error code.")
  for _, op in ipairs(OPS) do
    local e = st.errors[op]
    for _, code in ipairs(sorted_keys(e)) do
      sample("resv_errors_total", 'op="' .. op .. '",code="' .. code .. '"', e[code])
    end
  end
  header("resv_call_duration_seconds", "histogram",
         "Time from a call to its answer (the memory store observes one call in 64).")
  for _, op in ipairs(OPS) do
    local h = st.latency[op]
    local o = 'op="' .. op .. '"'
    for _, b in ipairs(h.buckets) do
      sample("resv_call_duration_seconds_bucket", o .. ',le="' .. number(b.le) .. '"', b.count)
    end
    sample("resv_call_duration_seconds_sum", o, h.sum)
    sample("resv_call_duration_seconds_count", o, h.count)
  end
  header("resv_duplicate_key_retries_total", "counter",
         "Upserts that met a duplicate key and read the key again (MongoDB).")
  sample("resv_duplicate_key_retries_total", "", st.duplicate_key_retries)
  header("resv_setup_failures_total", "counter",
         "Set-ups of a type (collection, format record) that failed.")
  sample("resv_setup_failures_total", "", st.setup_failures)
  header("resv_slow_calls_total", "counter", "Calls that took longer than slow_ms.")
  sample("resv_slow_calls_total", "", st.slow_calls)
  header("resv_jobs_waiting", "gauge", "Jobs queued for a dispatcher thread.")
  sample("resv_jobs_waiting", "", st.jobs_waiting)
  header("resv_jobs_running", "gauge", "Jobs a dispatcher thread is running.")
  sample("resv_jobs_running", "", st.jobs_running)
  if st.entries then
    header("resv_entries", "gauge", "Reservations the store holds (memory and file stores).")
    sample("resv_entries", "", st.entries)
    header("resv_bytes", "gauge", "Bytes those reservations take (memory and file stores).")
    sample("resv_bytes", "", st.bytes)
  end
  line("")
  return concat(out, "\n")
end

return _M

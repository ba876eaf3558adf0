-- resv.cli.output: what the resv command prints. For people, one line an
-- answer (answer_text: "pending, owner t1/u1, expires ..."); with --json,
-- one JSON document a line (json, a small encoder of its own: it sorts an
-- object's keys, so that the output is stable, and writes every integer
-- with all its digits (a Lua number up to 2^53, an int64_t cdata past
-- it). Debian's lua-dkjson writes numbers with tostring, 14 significant
-- digits, refuses cdata and orders keys as pairs() does; lua-cjson refuses
-- cdata and does not sort keys either).
local os = os
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local getmetatable = getmetatable
local concat = table.concat
local sort = table.sort
local format = string.format

local _M = {}

-- An integer answer field (a Lua number, or an int64_t cdata past 2^53)
-- as decimal digits.
local function integer_text(v)
  if type(v) == "number" then
    return format("%d", v)
  end
  return (tostring(v):gsub("[UL]+$", ""))
end

-- "1 document", "2 documents": n and the word for one or for many.
local function count_text(n, one, many)
  return integer_text(n) .. " " .. (n == 1 and one or many)
end


local json_escapes = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return json_escapes[c] or format("\\u%04x", c:byte())
  end) .. '"'
end

-- JSON of a value made of strings, integers, booleans and tables (a table
-- with t[1], or marked by array = true, is an array; keys of an object
-- are sorted, so the output is stable).
local function json(v, array)
  local t = type(v)
  if t == "string" then
    return json_string(v)
  elseif t == "number" or t == "cdata" then
    return integer_text(v)
  elseif t == "boolean" then
    return tostring(v)
  elseif t == "nil" then
    return "null"
  end
  local mt = getmetatable(v)
  if v[1] ~= nil or array or (mt and mt.__jsonarray) then
    local parts = {}
    for i = 1, #v do parts[i] = json(v[i]) end
    return "[" .. concat(parts, ",") .. "]"
  end
  local names = {}
  for k in pairs(v) do names[#names + 1] = k end
  sort(names)
  local parts = {}
  for i, k in ipairs(names) do
    parts[i] = json_string(k) .. ":" .. json(v[k], k == "holds")
  end
  return "{" .. concat(parts, ",") .. "}"
end

-- An instant in epoch ms as UTC ISO 8601, with the distance from now.
local function instant_text(ms, now)
  if type(ms) ~= "number" then
    return integer_text(ms)
  end
  local s = math.floor(ms / 1000)
  local text = os.date("!%Y-%m-%dT%H:%M:%S", s) .. format(".%03dZ", ms - s * 1000)
  if now then
    local d = (ms - now) / 1000
    if d >= 0 then
      text = text .. format(" (in %.1f s)", d)
    else
      text = text .. format(" (%.1f s ago)", -d)
    end
  end
  return text
end

local function owner_text(o)
  return o.tenant .. "/" .. o.id
end

-- One line for people: what the answer r of a call says.
local function answer_text(r, now)
  local parts = { r.status }
  if r.owner then
    parts[#parts + 1] = "owner " .. owner_text(r.owner)
  end
  if r.expires_at then
    parts[#parts + 1] = "expires " .. instant_text(r.expires_at, now)
  end
  if r.version then
    parts[#parts + 1] = "version " .. integer_text(r.version)
  end
  if r.holds then
    parts[#parts + 1] = "holds " .. concat(r.holds, " ")
  end
  if r.count then
    parts[#parts + 1] = count_text(r.count, "reservation", "reservations")
  end
  return concat(parts, ", ")
end

-- A key as the command line writes it: TENANT/NAMESPACE/KEY.
local function key_text(k)
  return k.tenant .. "/" .. k.namespace .. "/" .. k.key
end

-- Writes an answer: value as JSON with --json, else the line text.
local function emit(ctx, value, text)
  if ctx.json then
    ctx.out:write(json(value), "\n")
  else
    ctx.out:write(text, "\n")
  end
end

-- The store as its description names it ("resv store (file DIR, ...)",
-- "mongodb HOST/DB (...)").
local function store_text(store)
  return (tostring(store):gsub("^resv%.store: ", ""))
end

-- Where a store is, in an error: "the file store DIR" (path: its
-- directory), else "database DB of mongodb HOSTS".
local function where_text(store, path)
  if path then return "the file store " .. path end
  local hosts, db = tostring(store):match("mongodb (%S-)/(%S+)")
  return "database " .. (db or "?") .. " of mongodb " .. (hosts or "?")
end

_M.integer_text = integer_text
_M.count_text = count_text
_M.json = json
_M.instant_text = instant_text
_M.owner_text = owner_text
_M.answer_text = answer_text
_M.key_text = key_text
_M.emit = emit
_M.store_text = store_text
_M.where_text = where_text

return _M

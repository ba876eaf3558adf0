-- resv.cli: the `resv` command (bin/resv; SPEC section 13), what an
-- operator needs on a store named by --uri (MongoDB) or --path (the file
-- store): look at a key, release a stuck one, and the other subcommands
-- listed in USAGE below.
--
-- Each subcommand is a row of COMMANDS: its usage line, its options, how
-- many arguments it takes, and a function that runs it on an open store.
-- Bad arguments are answered with the usage line on stderr and exit code
-- 2; an error of the store with its "<code>: <message>" and exit code 1.
-- Output is for people by default; --json prints one JSON document per
-- answer (ls: per reservation) on its own line instead.
local resv = require "resv"

local io = io
local os = os
local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local tonumber = tonumber
local setmetatable = setmetatable
local getmetatable = getmetatable
local concat = table.concat
local sort = table.sort
local format = string.format

local _M = {}

---------------------------------------------------------------------------
-- Output

-- An integer answer field (a Lua number, or an int64_t cdata past 2^53)
-- as decimal digits.
local function integer_text(v)
  if type(v) == "number" then
    return format("%d", v)
  end
  return (tostring(v):gsub("[UL]+$", ""))
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
_M.json = json

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
    parts[#parts + 1] = integer_text(r.count) .. (r.count == 1 and " reservation" or " reservations")
  end
  return concat(parts, ", ")
end

---------------------------------------------------------------------------
-- Arguments

-- A usage error: main prints it with the command's usage line, exit 2.
local Usage = {}
Usage.__index = Usage
local function usage_error(msg)
  return setmetatable({ msg = msg }, Usage)
end

-- TYPE is CONTEXT/AGGREGATE (split at the first slash).
local function parse_type(s)
  local context, aggregate = s:match("^([^/]*)/(.*)$")
  if not context or context == "" or aggregate == "" then
    return nil, "TYPE must be CONTEXT/AGGREGATE, got '" .. s .. "'"
  end
  return { context = context, aggregate = aggregate }
end

-- KEY is TENANT/NAMESPACE/KEY, split at the first two slashes (so a key
-- may hold slashes); the system tenant is empty: /email/ann@example.com.
local function parse_key(s)
  local tenant, ns, key = s:match("^([^/]*)/([^/]*)/(.*)$")
  if not tenant then
    return nil, "KEY must be TENANT/NAMESPACE/KEY (the system tenant is "
      .. "empty: /email/ann@example.com), got '" .. s .. "'"
  end
  return { tenant = tenant, namespace = ns, key = key }
end

-- OWNER is TENANT/ID, split at the first slash; without a slash, the
-- system tenant's ID.
local function parse_owner(s)
  local tenant, id = s:match("^([^/]*)/(.*)$")
  if not tenant then
    tenant, id = "", s
  end
  return { tenant = tenant, id = id }
end

local function key_text(k)
  return k.tenant .. "/" .. k.namespace .. "/" .. k.key
end

---------------------------------------------------------------------------
-- Subcommands

local COMMANDS = {}
local ORDER = {}

local function command(name, spec)
  spec.name = name
  COMMANDS[name] = spec
  ORDER[#ORDER + 1] = name
end

-- The type named by args[i], or a usage error.
local function open_type(ctx, s)
  local ty, err = parse_type(s)
  if not ty then return nil, usage_error(err) end
  local t
  t, err = ctx.store:type(ty.context, ty.aggregate)
  if not t then return nil, err end
  return t
end

local function emit(ctx, value, text)
  if ctx.json then
    ctx.out:write(json(value), "\n")
  else
    ctx.out:write(text, "\n")
  end
end

command("get", {
  args = "TYPE KEY",
  min = 2, max = 2,
  summary = "show the reservation of KEY",
  help = [[
Shows the reservation of KEY in TYPE: absent, pending (its owner, expiry
and holds), expired (pending past its expiry: free to take) or confirmed
(its owner and version).]],
  run = function(ctx, args)
    local t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    local key
    key, err = parse_key(args[2])
    if not key then return nil, usage_error(err) end
    local r
    r, err = t:get(key)
    if not r then return nil, err end
    emit(ctx, r, answer_text(r, ctx.store:now()))
    return true
  end,
})

command("release", {
  args = "TYPE KEY OWNER",
  min = 3, max = 3,
  summary = "delete OWNER's reservation of KEY",
  help = [[
Deletes OWNER's reservation of KEY in TYPE, pending or confirmed (a stuck
key, or a value its owner gave up). Answers released, or absent when OWNER
holds no reservation of KEY (another owner's is never touched).]],
  run = function(ctx, args)
    local t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    local key
    key, err = parse_key(args[2])
    if not key then return nil, usage_error(err) end
    local r
    r, err = t:release(key, parse_owner(args[3]))
    if not r then return nil, err end
    emit(ctx, r, answer_text(r))
    return true
  end,
})

-- The types a command runs on: the one named by args[1], or with no
-- argument every type of the store. Returns an array of type objects.
local function types_of(ctx, args)
  if args[1] then
    local t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    return { t }
  end
  local list, err = ctx.store:list_types()
  if not list then return nil, err end
  local out = {}
  for i, n in ipairs(list) do
    local t
    t, err = ctx.store:type(n.context, n.aggregate)
    if not t then return nil, err end
    out[i] = t
  end
  return out
end

command("types", {
  args = "",
  min = 0, max = 0,
  summary = "list the store's types",
  help = [[
Lists the types the store holds, one CONTEXT/AGGREGATE a line, sorted by
collection name (MongoDB: the collections named wow_reservation__*; the
file store: its named databases).]],
  run = function(ctx)
    local list, err = ctx.store:list_types()
    if not list then return nil, err end
    for _, n in ipairs(list) do
      emit(ctx, n, n.context .. "/" .. n.aggregate)
    end
    return true
  end,
})

-- A whole number from an option's text, or nil and a usage error.
local function count_option(name, text, lo)
  local n = tonumber(text)
  if not n or n ~= math.floor(n) or n < lo or n > 2 ^ 53 or not text:match("^%d+$") then
    return nil, usage_error("--" .. name .. " must be a whole number from " .. lo
                            .. ", got '" .. text .. "'")
  end
  return n
end
_M.count_option = count_option

command("sweep", {
  args = "[TYPE]",
  min = 0, max = 1,
  summary = "delete pending reservations long expired",
  options = { { "--grace-ms MS", "expired for at least MS ms (default 60000)" } },
  takes = { ["grace-ms"] = true },
  help = [[
Deletes TYPE's pending reservations whose expiry is at least the grace in
the past (SPEC section 5), never a confirmed or a live one; answers swept
with their count. Without TYPE: every type of the store, a line each.
On MongoDB expired reservations stay until swept.]],
  store_options = function(opts)
    if opts["grace-ms"] == nil then return {} end
    local ms, err = count_option("grace-ms", opts["grace-ms"], 1)
    if not ms then return nil, err end
    return { sweep_grace_ms = ms }
  end,
  run = function(ctx, args)
    local types, err = types_of(ctx, args)
    if not types then return nil, err end
    for _, t in ipairs(types) do
      local r
      r, err = t:sweep()
      if not r then return nil, err end
      if args[1] then
        emit(ctx, r, answer_text(r))
      else
        r.collection = t:collection()
        emit(ctx, r, t:collection() .. ": " .. answer_text(r))
      end
    end
    return true
  end,
})

-- A scan cursor (bytes) as text for --after, and back.
local function cursor_text(c)
  return (c:gsub(".", function(ch) return format("%02x", ch:byte()) end))
end
local function cursor_bytes(text)
  if #text % 2 ~= 0 or text:find("[^%x]") then return nil end
  return (text:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end))
end

local STATES = { pending = true, expired = true, confirmed = true, format = true }

-- One line for people: a scanned entry.
local function entry_text(e, now)
  if e.status == "format" then
    return "_id " .. e.id .. "  not a format-1 reservation: " .. e.problem
  end
  return key_text(e.key) .. "  " .. answer_text(e, now)
end

-- Collects up to limit entries of t whose status is state (nil: any) from
-- the cursor after on, consuming whole pages so that the cursor returned
-- is exact. Returns entries, next cursor (nil at the end), first page.
local function collect(t, after, limit, state)
  local out, first = {}, nil
  local cursor = after
  repeat
    local page, err = t:scan { after = cursor, limit = limit - #out }
    if not page then return nil, err end
    first = first or page
    for _, e in ipairs(page.entries) do
      if state == nil or e.status == state then out[#out + 1] = e end
    end
    cursor = page.next
  until cursor == nil or #out >= limit
  return out, cursor, first
end

command("ls", {
  args = "TYPE",
  min = 1, max = 1,
  summary = "list a type's reservations, a page at a time",
  options = {
    { "--limit N", "at most N reservations (default 100, at most 10000)" },
    { "--after CURSOR", "the page after CURSOR (printed by the previous page)" },
    { "--state STATE", "only pending, expired, confirmed or format ones" },
  },
  takes = { limit = true, after = true, state = true },
  help = [[
Lists TYPE's reservations in the store's order (MongoDB: by _id), one a
line: the key and what get would answer. A document that is not a
format-1 reservation is listed with its _id and why (state format). When
more follow, the last line is "more: --after CURSOR"; --json prints the
page as one document {"entries": [...], "next": CURSOR}.]],
  run = function(ctx, args, opts)
    local limit, err = 100, nil
    if opts.limit then
      limit, err = count_option("limit", opts.limit, 1)
      if not limit then return nil, err end
      if limit > 10000 then return nil, usage_error("--limit must be at most 10000") end
    end
    local after
    if opts.after then
      after = cursor_bytes(opts.after)
      if not after or after == "" then
        return nil, usage_error("--after must be a cursor printed by ls, got '" .. opts.after .. "'")
      end
    end
    if opts.state and not STATES[opts.state] then
      return nil, usage_error("--state must be pending, expired, confirmed or format, got '"
                              .. opts.state .. "'")
    end
    local t
    t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    local entries, next_cursor = collect(t, after, limit, opts.state)
    if not entries then return nil, next_cursor end
    if ctx.json then
      local page = { entries = setmetatable(entries, { __jsonarray = true }) }
      page.next = next_cursor and cursor_text(next_cursor) or nil
      ctx.out:write(json(page), "\n")
      return true
    end
    local now = ctx.store:now()
    for _, e in ipairs(entries) do ctx.out:write(entry_text(e, now), "\n") end
    if next_cursor then ctx.out:write("more: --after ", cursor_text(next_cursor), "\n") end
    return true
  end,
})

-- The exit code of a check that found documents not of the layout.
local EXIT_NONCONFORMING = 3

-- Checks one type t: prints what does not conform and its summary line.
-- Returns true when everything conforms, false when not, nil, err when
-- the store failed.
local function check_one(ctx, t)
  local err
  local counts = { documents = 0, conforming = 0, nonconforming = 0 }
  local format_state, format_problem
  local bad = {}
  local cursor
  repeat
    local page
    page, err = t:scan { after = cursor, limit = 1000 }
    if not page then return nil, err end
    if not cursor then
      format_state, format_problem = page.format, page.format_problem
    end
    for _, e in ipairs(page.entries) do
      counts.documents = counts.documents + 1
      if e.status == "format" then
        counts.nonconforming = counts.nonconforming + 1
        local item = { id = e.id, problem = e.problem }
        bad[#bad + 1] = item
        if not ctx.json then
          ctx.out:write("not a format-1 reservation: _id ", e.id, ": ", e.problem, "\n")
        end
      else
        counts.conforming = counts.conforming + 1
      end
    end
    cursor = page.next
  until not cursor
  local record
  if format_state == 1 then
    record = "format 1"
  elseif format_state == 0 then
    record = "none"
  else
    record = "bad: " .. (format_problem or "?")
  end
  local ok = counts.nonconforming == 0 and format_state ~= -1
               and (format_state == 1 or counts.documents == 0)
  if ctx.json then
    ctx.out:write(json({ collection = t:collection(), format_record = record,
                         documents = counts.documents, conforming = counts.conforming,
                         nonconforming = setmetatable(bad, { __jsonarray = true }),
                         ok = ok }), "\n")
  else
    if format_state == 0 and counts.documents > 0 then
      ctx.out:write("no format record, but ", counts.documents, " documents\n")
    elseif format_state == -1 then
      ctx.out:write("format record: ", format_problem or "?", "\n")
    end
    ctx.out:write(format("%s: format record %s, %d documents, %d conform, %d do not\n",
                         t:collection(), record, counts.documents, counts.conforming,
                         counts.nonconforming))
  end
  return ok
end

command("check", {
  args = "[TYPE]",
  min = 0, max = 1,
  summary = "check the format record and every document of a type",
  help = [[
Reads TYPE's format record and every document (the file store: every
record) and checks each against the layout of SPEC section 3 with the
store's own decoder. Lists each one that is not a format-1 reservation,
with its _id and why; changes nothing. Ends with a summary line. Exit
code 0 when everything conforms, 3 when something does not. Without
TYPE: every type of the store, a summary line each.]],
  run = function(ctx, args)
    local types, err = types_of(ctx, args)
    if not types then return nil, err end
    local all_ok = true
    for _, t in ipairs(types) do
      local ok
      ok, err = check_one(ctx, t)
      if ok == nil then return nil, err end
      all_ok = all_ok and ok
    end
    if not all_ok then return nil, EXIT_NONCONFORMING end
    return true
  end,
})

command("stats", {
  args = "",
  min = 0, max = 0,
  summary = "the store's size and counters",
  options = { { "--prometheus", "the counters in the Prometheus text format (resv.metrics)" } },
  flags = { prometheus = true },
  help = [[
Opens every type of the store (one get each, of a key nobody uses) and
prints what store:stats() says: the types, and for the file store the
entries (reservations, expired ones included) and bytes. The call
counters count this command's own calls only (each process counts its
own): a service exports its counters itself (resv.metrics, the
OpenResty example's GET /metrics). --prometheus prints resv.metrics.]],
  run = function(ctx, _, opts)
    local list, err = ctx.store:list_types()
    if not list then return nil, err end
    for _, n in ipairs(list) do
      local t
      t, err = ctx.store:type(n.context, n.aggregate)
      if not t then return nil, err end
      -- One get sets the type up in this process, so that stats counts
      -- its entries; the type exists, so the set-up writes nothing.
      local r
      r, err = t:get { namespace = "resv-stats", key = "resv-stats" }
      if not r then return nil, err end
    end
    if opts.prometheus then
      ctx.out:write(resv.metrics(ctx.store))
      return true
    end
    local st
    st, err = ctx.store:stats()
    if not st then return nil, err end
    local s = { store = tostring(ctx.store):gsub("^resv%.store: ", ""), types = #list,
                entries = st.entries, bytes = st.bytes }
    local text = s.store .. ": " .. s.types .. (s.types == 1 and " type" or " types")
    if st.entries then
      text = text .. format(", %d entries, %d bytes", st.entries, st.bytes)
    end
    emit(ctx, s, text)
    return true
  end,
})

-- A store named by --from or --to: a MongoDB URI, else a file store's
-- directory.
local function store_spec(text, database)
  if text:match("^mongodb:") or text:match("^mongodb%+srv:") then
    return { uri = text, database = database }
  end
  if database then return nil end
  return { path = text }
end

-- True when stderr is a terminal (the progress bar goes there).
local function stderr_is_terminal()
  local ok, ffi = pcall(require, "ffi")
  if not ok then return false end
  if not pcall(ffi.typeof, "int (*)(int)") then return false end
  pcall(ffi.cdef, "int isatty(int fd);")
  local fine, yes = pcall(function() return ffi.C.isatty(2) == 1 end)
  return fine and yes
end

local function progress(ctx, done, total, what)
  if not ctx.bar then return end
  local width = 30
  local filled = total > 0 and math.floor(width * done / total) or width
  ctx.errout:write(format("\r[%s%s] %d/%d %s", string.rep("#", filled),
                          string.rep(".", width - filled), done, total, what))
  ctx.errout:flush()
end

command("copy", {
  args = "",
  min = 0, max = 0,
  opens_itself = true,
  summary = "copy every type of one store into another",
  options = {
    { "--from URI|DIR", "the store to read (a mongodb:// URI, else a file store)" },
    { "--to URI|DIR", "the store to write" },
    { "--from-database DB", "MongoDB: the database of --from" },
    { "--to-database DB", "MongoDB: the database of --to" },
  },
  takes = { from = true, to = true, ["from-database"] = true, ["to-database"] = true },
  help = [[
Copies every reservation of every type of the --from store into the --to
store, exactly (owner, state, expiry, holds, version), when its key is
free there. Never overwrites: a key that holds another reservation in
--to is listed ("differs: TYPE KEY") and left as it is; one that holds the
same reservation counts as same. So a copy run again, or after it was
interrupted, writes only what is missing. Documents of --from that are not
format-1 reservations are listed and skipped. A progress bar on a
terminal (stderr), then a summary line. Exit code 0, or 3 when some keys
differ or were skipped.]],
  run = function(ctx, _, opts)
    if not opts.from or not opts.to then
      return nil, usage_error("copy needs --from and --to")
    end
    if ctx.opts.uri or ctx.opts.path or ctx.opts.database then
      return nil, usage_error("copy names its stores with --from and --to")
    end
    local from_spec = store_spec(opts.from, opts["from-database"])
    local to_spec = store_spec(opts.to, opts["to-database"])
    if not from_spec or not to_spec then
      return nil, usage_error("--from-database and --to-database are for MongoDB URIs")
    end
    local from, err = resv.open(from_spec)
    if not from then return nil, "--from: " .. err end
    local to
    to, err = resv.open(to_spec)
    if not to then
      from:close()
      return nil, "--to: " .. err
    end
    ctx.bar = not ctx.json and stderr_is_terminal()
    local ok
    ok, err = _M.copy_stores(ctx, from, to)
    from:close()
    to:close()
    if ok == nil then return nil, err end
    if not ok then return nil, EXIT_NONCONFORMING end
    return true
  end,
})

-- Copies every type of store from into store to (the copy command).
-- Returns true (nothing differs), false (something differs or was
-- skipped), or nil, err.
function _M.copy_stores(ctx, from, to)
  local list, err = from:list_types()
  if not list then return nil, "--from: " .. err end
  local total = 0
  if ctx.bar then
    for _, n in ipairs(list) do
      local t = assert(from:type(n.context, n.aggregate))
      local cursor
      repeat
        local page
        page, err = t:scan { after = cursor, limit = 1000 }
        if not page then return nil, "--from: " .. err end
        total = total + #page.entries
        cursor = page.next
      until not cursor
    end
  end
  local counts = { added = 0, same = 0, different = 0, skipped = 0 }
  local done = 0
  for _, n in ipairs(list) do
    local name = n.context .. "/" .. n.aggregate
    local src = assert(from:type(n.context, n.aggregate))
    local dst
    dst, err = to:type(n.context, n.aggregate)
    if not dst then return nil, "--to: " .. err end
    local cursor
    repeat
      local page
      page, err = src:scan { after = cursor, limit = 1000 }
      if not page then return nil, "--from: " .. err end
      for _, e in ipairs(page.entries) do
        local line
        if e.status == "format" then
          counts.skipped = counts.skipped + 1
          line = "skipped: " .. name .. " _id " .. e.id .. ": " .. e.problem
        else
          local outcome
          outcome, err = dst:put(e)
          if not outcome then return nil, "--to: " .. err end
          counts[outcome] = counts[outcome] + 1
          if outcome == "different" then line = "differs: " .. name .. " " .. key_text(e.key) end
        end
        if line then
          if ctx.bar then ctx.errout:write("\r\27[K") end
          if ctx.json then
            ctx.out:write(json({ type = name, key = e.key, id = e.id,
                                 outcome = e.status == "format" and "skipped" or "different" }), "\n")
          else
            ctx.out:write(line, "\n")
          end
        end
        done = done + 1
        if ctx.bar and (done % 100 == 0 or done == total) then progress(ctx, done, total, name) end
      end
      cursor = page.next
    until not cursor
  end
  if ctx.bar then ctx.errout:write("\r\27[K") end
  local summary = format("copy: %d types, %d reservations: %d added, %d same, %d differ "
                         .. "(not overwritten), %d skipped (not format-1)", #list,
                         counts.added + counts.same + counts.different, counts.added,
                         counts.same, counts.different, counts.skipped)
  if ctx.json then
    counts.types = #list
    ctx.out:write(json(counts), "\n")
  else
    ctx.out:write(summary, "\n")
  end
  return counts.different == 0 and counts.skipped == 0
end

---------------------------------------------------------------------------
-- The command line

local GLOBAL_OPTIONS = {
  { "--uri URI", "the MongoDB store at URI" },
  { "--path DIR", "the file store in DIR" },
  { "--database DB", "MongoDB: the database (default: the URI's, else resv)" },
  { "--json", "print JSON, one document a line" },
  { "--help", "this text; COMMAND --help: the command's" },
}
local GLOBAL_TAKES = { uri = true, path = true, database = true }
local GLOBAL_FLAGS = { json = true, help = true }

local function usage_line(cmd)
  if cmd then
    local opts = {}
    for _, o in ipairs(cmd.options or {}) do opts[#opts + 1] = "[" .. o[1] .. "]" end
    local extra = #opts > 0 and (" " .. concat(opts, " ")) or ""
    return "usage: resv (--uri URI | --path DIR) [--json] " .. cmd.name
      .. extra .. (cmd.args ~= "" and (" " .. cmd.args) or "")
  end
  return "usage: resv (--uri URI | --path DIR) [--database DB] [--json] COMMAND [ARGS]"
end

local NAMES_HELP = [[
TYPE is CONTEXT/AGGREGATE, KEY is TENANT/NAMESPACE/KEY (split at the first
two slashes; the system tenant is empty: /email/ann@example.com), OWNER is
TENANT/ID (an ID alone: the system tenant's).]]

local function options_text(list)
  local lines = {}
  for _, o in ipairs(list) do
    lines[#lines + 1] = format("  %-18s %s", o[1], o[2])
  end
  return concat(lines, "\n")
end

local function help_text(cmd)
  if cmd then
    local parts = { usage_line(cmd), "", cmd.help }
    if cmd.options then
      parts[#parts + 1] = "\noptions:\n" .. options_text(cmd.options)
    end
    parts[#parts + 1] = "\nstore options:\n" .. options_text(GLOBAL_OPTIONS)
    parts[#parts + 1] = "\n" .. NAMES_HELP
    return concat(parts, "\n") .. "\n"
  end
  local lines = { usage_line(), "", "commands:" }
  for _, name in ipairs(ORDER) do
    local c = COMMANDS[name]
    lines[#lines + 1] = format("  %-34s %s", name .. " " .. c.args, c.summary)
  end
  lines[#lines + 1] = "\noptions:\n" .. options_text(GLOBAL_OPTIONS)
  lines[#lines + 1] = "\n" .. NAMES_HELP
  return concat(lines, "\n") .. "\n"
end

-- Splits argv into the store options, the command, its options and its
-- arguments. Returns a table, or nil, a usage message and the command.
local function parse(argv)
  local ctx = { opts = {}, cmd_opts = {}, args = {} }
  local i, n = 1, #argv
  local only_args = false
  while i <= n do
    local a = argv[i]
    if only_args or a:sub(1, 2) ~= "--" or a == "--" then
      if a == "--" and not only_args then
        only_args = true
      elseif a == "-h" and not only_args then
        ctx.opts.help = true
      elseif not ctx.cmd then
        local cmd = COMMANDS[a]
        if not cmd then
          return nil, "unknown command '" .. a .. "'"
        end
        ctx.cmd = cmd
      else
        ctx.args[#ctx.args + 1] = a
      end
    else
      local name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:sub(3)
      local own = ctx.cmd and ctx.cmd.takes and ctx.cmd.takes[name]
      local flag = ctx.cmd and ctx.cmd.flags and ctx.cmd.flags[name]
      local into = (own or flag) and ctx.cmd_opts or ctx.opts
      if GLOBAL_TAKES[name] or own then
        if value == nil then
          i = i + 1
          value = argv[i]
          if value == nil then
            return nil, "--" .. name .. " needs a value", ctx.cmd
          end
        end
        if into[name] ~= nil then
          return nil, "--" .. name .. " given twice", ctx.cmd
        end
        into[name] = value
      elseif GLOBAL_FLAGS[name] or flag then
        if value ~= nil then
          return nil, "--" .. name .. " takes no value", ctx.cmd
        end
        into[name] = true
      else
        return nil, "unknown option " .. a, ctx.cmd
      end
    end
    i = i + 1
  end
  return ctx
end

-- Opens the store the options name, with the command's own store options
-- (cmd.store_options) from its options cmd_opts.
local function open_store(opts, cmd, cmd_opts)
  local uri, path = opts.uri, opts.path
  if (uri == nil) == (path == nil) then
    return nil, usage_error("name the store with --uri URI or --path DIR (one of them)")
  end
  if opts.database and not uri then
    return nil, usage_error("--database is for a MongoDB store (--uri)")
  end
  local o, err = {}, nil
  if cmd.store_options then
    o, err = cmd.store_options(cmd_opts)
    if not o then return nil, err end
  end
  o.uri, o.path, o.database = uri, path, opts.database
  local store
  store, err = resv.open(o)
  if not store then return nil, err end
  return store
end

-- Runs the command line argv (the script's arg table) with output to out
-- and messages to errout (io.stdout and io.stderr by default). Returns
-- the exit code: 0 done, 1 a store error, 2 bad arguments.
function _M.main(argv, out, errout)
  out = out or io.stdout
  errout = errout or io.stderr
  local list = {}
  for i = 1, #argv do list[i] = argv[i] end
  local ctx, msg, cmd = parse(list)
  if not ctx then
    errout:write("resv: ", msg, "\n", usage_line(cmd), "\n")
    return 2
  end
  cmd = ctx.cmd
  if ctx.opts.help then
    out:write(help_text(cmd))
    return 0
  end
  if not cmd then
    errout:write("resv: no command given\n", help_text())
    return 2
  end
  if #ctx.args < cmd.min or #ctx.args > cmd.max then
    errout:write("resv: ", cmd.name, " takes ", cmd.args == "" and "no arguments"
                 or cmd.args, "\n", usage_line(cmd), "\n")
    return 2
  end
  ctx.out, ctx.errout, ctx.json = out, errout, ctx.opts.json
  local store, err
  if not cmd.opens_itself then
    store, err = open_store(ctx.opts, cmd, ctx.cmd_opts)
  end
  local ok = store or cmd.opens_itself
  if ok then
    ctx.store = store
    ok, err = cmd.run(ctx, ctx.args, ctx.cmd_opts)
    if store then store:close() end
  end
  if ok then
    return 0
  end
  if type(err) == "number" then
    return err -- an exit code of the command's own (check)
  end
  if getmetatable(err) == Usage then
    errout:write("resv: ", err.msg, "\n", usage_line(cmd), "\n")
    return 2
  end
  errout:write("resv: ", tostring(err), "\n")
  return 1
end

-- For the subcommands defined in other files of this module (cli_recover.lua)
-- and the tests.
_M.command = command
_M.usage_error = usage_error
_M.parse_key = parse_key
_M.parse_owner = parse_owner
_M.key_text = key_text
_M.answer_text = answer_text
_M.instant_text = instant_text
_M.integer_text = integer_text
_M.emit = emit
_M.open_type = open_type
require("resv.cli_recover")(_M)

return _M

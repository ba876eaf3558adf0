-- resv.cli.commands: the subcommands that work on one store, opened by
-- main (cli.lua) from --uri or --path: get, release, types, sweep, ls,
-- check and stats. Each is a row of the command table (args.lua):
-- its usage, its options and a run(ctx, args, opts) on the open store
-- ctx.store. A type that does not exist is an error naming it: a call's
-- (the store is opened with no_create) or, for ls and check, one found by
-- the scan (no_type).
local resv = require "resv"
local cmdline = require "resv.cli.args"
local output = require "resv.cli.output"

local ipairs = ipairs
local tonumber = tonumber
local setmetatable = setmetatable
local format = string.format

local command = cmdline.command
local usage_error = cmdline.usage_error
local parse_type = cmdline.parse_type
local parse_key = cmdline.parse_key
local parse_owner = cmdline.parse_owner
local count_option = cmdline.count_option
local EXIT_NONCONFORMING = cmdline.EXIT_NONCONFORMING
local json = output.json
local emit = output.emit
local count_text = output.count_text
local key_text = output.key_text
local answer_text = output.answer_text
local store_text = output.store_text
local where_text = output.where_text

local _M = {}

-- The type named by args[i], or a usage error.
local function open_type(ctx, s)
  local ty, err = parse_type(s)
  if not ty then return nil, usage_error(err) end
  local t
  t, err = ctx.store:type(ty.context, ty.aggregate)
  if not t then return nil, err end
  return t
end

command("get", {
  args = "TYPE KEY",
  min = 2, max = 2,
  argtypes = { "type", "key" },
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
  argtypes = { "type", "key" },
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

-- The error of a type that does not exist, found by a scan (a first page
-- without a format record or any document), worded as a call's.
local function no_type(ctx, t, name)
  return "invalid: no type " .. name .. " in " .. where_text(ctx.store, ctx.opts.path)
    .. " (no " .. (ctx.opts.path and "database " or "collection ") .. t:collection()
    .. "); nothing was created"
end

-- The store's types (store:list_types()). On MongoDB a database exists
-- only while it holds a collection, so one that holds no type is taken
-- for a --database typed wrong: an error naming it. An empty file store
-- exists (open checked it) and lists no type.
local function list_types(ctx)
  local list, err = ctx.store:list_types()
  if not list then return nil, err end
  if #list == 0 and ctx.opts.uri then
    return nil, "invalid: no type in " .. where_text(ctx.store)
      .. " (no collection wow_reservation__*): is --database right?"
  end
  return list
end

-- The types a command runs on: the one named by args[1], or with no
-- argument every type of the store. Returns an array of type objects and
-- an array of their names (CONTEXT/AGGREGATE).
local function types_of(ctx, args)
  if args[1] then
    local t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    return { t }, { args[1] }
  end
  local list, err = list_types(ctx)
  if not list then return nil, err end
  local out, names = {}, {}
  for i, n in ipairs(list) do
    local t
    t, err = ctx.store:type(n.context, n.aggregate)
    if not t then return nil, err end
    out[i], names[i] = t, n.context .. "/" .. n.aggregate
  end
  return out, names
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
    local list, err = list_types(ctx)
    if not list then return nil, err end
    for _, n in ipairs(list) do
      emit(ctx, n, n.context .. "/" .. n.aggregate)
    end
    return true
  end,
})

command("sweep", {
  args = "[TYPE]",
  min = 0, max = 1,
  argtypes = { "type" },
  summary = "delete pending reservations long expired",
  options = { { "--grace-ms MS", "expired for at least MS ms (default 60000)" } },
  takes = { ["grace-ms"] = true },
  help = [[
Deletes TYPE's pending reservations whose expiry is at least the grace in
the past (docs/design.md section 5), never a confirmed or a live one; answers swept
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
  argtypes = { "type" },
  help = [[
Lists TYPE's reservations in the store's order (MongoDB: by _id), one a
line: the key and what get would answer. A document that is not a
format-1 reservation is listed with its _id and why (state format). When
more follow, the last line is "more: --after CURSOR"; --json prints the
page as one document {"entries": [...], "next": CURSOR}.]],
  check = function(opts)
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
    return { limit = limit, after = after }
  end,
  run = function(ctx, args, opts)
    local limit, after = ctx.checked.limit, ctx.checked.after
    local t, err = open_type(ctx, args[1])
    if not t then return nil, err end
    local entries, next_cursor, first = collect(t, after, limit, opts.state)
    if not entries then return nil, next_cursor end
    if not after and first.format == 0 and #first.entries == 0 then
      return nil, no_type(ctx, t, args[1])
    end
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

-- Checks one type t (named name): prints what does not conform and its
-- summary line. Returns true when everything conforms, false when not,
-- nil, err when the store failed or the type does not exist.
local function check_one(ctx, t, name)
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
      if format_state == 0 and #page.entries == 0 then return nil, no_type(ctx, t, name) end
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
      ctx.out:write("no format record, but ", count_text(counts.documents, "document",
                                                         "documents"), "\n")
    elseif format_state == -1 then
      ctx.out:write("format record: ", format_problem or "?", "\n")
    end
    ctx.out:write(t:collection(), ": format record ", record, ", ",
                  count_text(counts.documents, "document", "documents"), ", ",
                  count_text(counts.conforming, "conforms", "conform"), ", ",
                  count_text(counts.nonconforming, "does not", "do not"), "\n")
  end
  return ok
end

command("check", {
  args = "[TYPE]",
  min = 0, max = 1,
  argtypes = { "type" },
  summary = "check the format record and every document of a type",
  help = [[
Reads TYPE's format record and every document (the file store: every
record) and checks each against the layout of docs/design.md section 3 with the
store's own decoder. Lists each one that is not a format-1 reservation,
with its _id and why; changes nothing. Ends with a summary line. Exit
code 0 when everything conforms, 3 when something does not. Without
TYPE: every type of the store, a summary line each.]],
  run = function(ctx, args)
    local types, names = types_of(ctx, args)
    if not types then return nil, names end
    if #types == 0 and not ctx.json then
      ctx.out:write(store_text(ctx.store), ": no type to check\n")
    end
    local all_ok = true
    for i, t in ipairs(types) do
      local ok, err = check_one(ctx, t, names[i])
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
    local list, err = list_types(ctx)
    if not list then return nil, err end
    for _, n in ipairs(list) do
      local t
      t, err = ctx.store:type(n.context, n.aggregate)
      if not t then return nil, err end
      -- One get sets the type up in this process, so that stats counts
      -- its entries; with no_create the set-up only reads.
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
    local s = { store = store_text(ctx.store), types = #list,
                entries = st.entries, bytes = st.bytes }
    local text = s.store .. ": " .. count_text(s.types, "type", "types")
    if st.entries then
      text = text .. ", " .. count_text(st.entries, "entry", "entries") .. ", "
        .. count_text(st.bytes, "byte", "bytes")
    end
    emit(ctx, s, text)
    return true
  end,
})

_M.open_type = open_type
_M.list_types = list_types
_M.types_of = types_of

return _M

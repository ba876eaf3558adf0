-- resv.cli.copy: the copy subcommand, every type of one store into
-- another (a file store into MongoDB when a host is outgrown, and back).
-- It opens its own stores, named by --from and --to: --from with
-- no_create (it must exist), --to made as needed. Each reservation is
-- written with type:put, which never overwrites, so a copy run again
-- writes only what is missing.
local resv = require "resv"
local cmdline = require "resv.cli.args"
local output = require "resv.cli.output"

local ipairs = ipairs
local format = string.format

local command = cmdline.command
local usage_error = cmdline.usage_error
local EXIT_NONCONFORMING = cmdline.EXIT_NONCONFORMING
local json = output.json
local count_text = output.count_text
local key_text = output.key_text
local where_text = output.where_text

local _M = {}

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
    { "--from URI|DIR", "the store to read (a mongodb:// URI, else a file store)",
      required = true },
    { "--to URI|DIR", "the store to write (made when missing)", required = true },
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
differ or were skipped. The --from store must exist (on MongoDB: hold a
type); the --to store, its types and collections are made as needed.]],
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
    from_spec.no_create = true
    from_spec.timeout_ms, to_spec.timeout_ms = ctx.timeout_ms, ctx.timeout_ms
    local from, err = resv.open(from_spec)
    if not from then return nil, "--from: " .. err end
    if from_spec.uri then -- a database that holds no type: see list_types
      local list
      list, err = from:list_types()
      if list and #list == 0 then
        err = "invalid: no type in " .. where_text(from)
          .. " (no collection wow_reservation__*): is --from-database right?"
      end
      if not list or #list == 0 then
        from:close()
        return nil, "--from: " .. err
      end
    end
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
  local summary = format("copy: %s, %s: %d added, %d same, %s (not overwritten), "
                         .. "%d skipped (not format-1)", count_text(#list, "type", "types"),
                         count_text(counts.added + counts.same + counts.different,
                                    "reservation", "reservations"),
                         counts.added, counts.same,
                         count_text(counts.different, "differs", "differ"), counts.skipped)
  if ctx.json then
    counts.types = #list
    ctx.out:write(json(counts), "\n")
  else
    ctx.out:write(summary, "\n")
  end
  return counts.different == 0 and counts.skipped == 0
end

return _M

-- resv.cli.args: the resv command's command line. The table of
-- subcommands (command() adds one: commands.lua and copy.lua do), the
-- names an argument is made of (TYPE, KEY, OWNER), whole numbers of
-- options, the usage line and the help, and argv split into the store
-- options, the command, its options and its arguments. Every mistake
-- here is a usage error: exit code 2 with the usage line.
local ipairs = ipairs
local tonumber = tonumber
local setmetatable = setmetatable
local getmetatable = getmetatable
local concat = table.concat
local format = string.format

local _M = {}

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

-- True when err is one usage_error made.
local function is_usage_error(err)
  return getmetatable(err) == Usage
end

-- A command is a table: name, args (its usage), min and max (how many
-- arguments), summary and help, options (usage and text; required = true
-- when it must be given), takes and flags (its options with and without
-- a value), argtypes (what parses each argument: "type" or "key"),
-- check(opts) (its options checked before the store opens: a table put
-- in ctx.checked, or nil and a usage error), store_options(opts) (more
-- resv.open options), opens_itself (no --uri or --path: run opens its
-- stores), and run(ctx, args, opts) (true, or nil and an error or an exit
-- code).
local COMMANDS = {}
local ORDER = {}

local function command(name, spec)
  spec.name = name
  COMMANDS[name] = spec
  ORDER[#ORDER + 1] = name
end

-- A whole number from an option's text, or nil and a usage error.
local function count_option(name, text, lo)
  local n = tonumber(text)
  if not n or n ~= math.floor(n) or n < lo or n > 2 ^ 53 or not text:match("^%d+$") then
    return nil, usage_error("--" .. name .. " must be a whole number from " .. lo
                            .. ", got '" .. text .. "'")
  end
  return n
end

-- The exit code of a check that found documents not of the layout, and of
-- a copy that found keys that differ or skipped documents.
local EXIT_NONCONFORMING = 3

-- The options that name the store (every command but copy, which names
-- its own) and those of every command.
local STORE_OPTIONS = {
  { "--uri URI", "the MongoDB store at URI" },
  { "--path DIR", "the file store in DIR" },
  { "--database DB", "MongoDB: the database (default: the URI's, else resv)" },
}
local GENERAL_OPTIONS = {
  { "--json", "print JSON, one document a line" },
  { "--timeout-ms MS", "each call's deadline in ms (default 5000)" },
  { "--version", "print resv's version" },
  { "--help", "this text; COMMAND --help: the command's" },
}
local GLOBAL_TAKES = { uri = true, path = true, database = true, ["timeout-ms"] = true }
local GLOBAL_FLAGS = { json = true, help = true, version = true }

-- The exit codes, for every command.
local EXIT_CODES = [[
exit codes:
  0  done (check: everything conforms; copy: nothing differs)
  1  an error of the store, or a store or type that does not exist
     (stderr: "resv: CODE: MESSAGE", CODE one of the library's error codes)
  2  bad arguments (stderr: what is wrong, then the usage line)
  3  check: something does not conform; copy: keys that differ, or
     documents skipped]]

-- An option as the usage line shows it: bare when required, else in
-- brackets.
local function option_usage(o)
  return o.required and o[1] or ("[" .. o[1] .. "]")
end

local function usage_line(cmd)
  local store = "(--uri URI [--database DB] | --path DIR) "
  local general = "[--json] [--timeout-ms MS] "
  if cmd then
    local opts = {}
    for _, o in ipairs(cmd.options or {}) do opts[#opts + 1] = option_usage(o) end
    local extra = #opts > 0 and (" " .. concat(opts, " ")) or ""
    return "usage: resv " .. (cmd.opens_itself and "" or store) .. general .. cmd.name
      .. extra .. (cmd.args ~= "" and (" " .. cmd.args) or "")
  end
  return "usage: resv " .. store .. general .. "COMMAND [ARGS]\n"
    .. "       resv --version | --help | COMMAND --help"
end

local NAMES_HELP = [[
TYPE is CONTEXT/AGGREGATE, KEY is TENANT/NAMESPACE/KEY (split at the first
two slashes; the system tenant is empty: /email/ann@example.com), OWNER is
TENANT/ID (an ID alone: the system tenant's).]]

local function options_text(list)
  local lines = {}
  for _, o in ipairs(list) do
    lines[#lines + 1] = format("  %-18s %s%s", o[1], o.required and "(required) " or "", o[2])
  end
  return concat(lines, "\n")
end

local function help_text(cmd)
  if cmd then
    local parts = { usage_line(cmd), "", cmd.help }
    if cmd.options then
      parts[#parts + 1] = "\noptions:\n" .. options_text(cmd.options)
    end
    if not cmd.opens_itself then
      parts[#parts + 1] = "\nstore options (one of --uri and --path is required):\n"
        .. options_text(STORE_OPTIONS)
    end
    parts[#parts + 1] = "\ngeneral options:\n" .. options_text(GENERAL_OPTIONS)
    parts[#parts + 1] = "\n" .. NAMES_HELP
    parts[#parts + 1] = "\n" .. EXIT_CODES
    return concat(parts, "\n") .. "\n"
  end
  local lines = { usage_line(), "", "commands:" }
  for _, name in ipairs(ORDER) do
    local c = COMMANDS[name]
    lines[#lines + 1] = format("  %-34s %s", name .. " " .. c.args, c.summary)
  end
  lines[#lines + 1] = "\nstore options (one of --uri and --path is required):\n"
    .. options_text(STORE_OPTIONS)
  lines[#lines + 1] = "\ngeneral options:\n" .. options_text(GENERAL_OPTIONS)
  lines[#lines + 1] = "\n" .. NAMES_HELP
  lines[#lines + 1] = "\nNo command makes a store, a type or a collection (copy's --to\n"
    .. "excepted): one that does not exist is an error that names it."
  lines[#lines + 1] = "\n" .. EXIT_CODES
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

local ARG_PARSERS = { type = parse_type, key = parse_key }

-- A command's arguments and options checked before the store opens (so a
-- typo is exit 2 whatever the store): what cmd.check returned, or nil and
-- a usage error.
local function check_args(cmd, args, opts)
  for i, kind in ipairs(cmd.argtypes or {}) do
    if args[i] ~= nil then
      local ok, msg = ARG_PARSERS[kind](args[i])
      if not ok then return nil, usage_error(msg) end
    end
  end
  if cmd.check then return cmd.check(opts) end
  return {}
end

-- The longest --timeout-ms, the library's limit: a day.
local MAX_TIMEOUT_MS = 24 * 3600 * 1000

-- The --timeout-ms of the options, or nil; a usage error when it is not a
-- whole number from 1 to MAX_TIMEOUT_MS.
local function timeout_option(opts)
  local text = opts["timeout-ms"]
  if text == nil then return nil end
  local ms, err = count_option("timeout-ms", text, 1)
  if ms and ms > MAX_TIMEOUT_MS then
    ms, err = nil, usage_error("--timeout-ms must be at most " .. MAX_TIMEOUT_MS
                               .. " (a day), got " .. text)
  end
  return ms, err
end

_M.usage_error = usage_error
_M.is_usage_error = is_usage_error
_M.parse_type = parse_type
_M.parse_key = parse_key
_M.parse_owner = parse_owner
_M.command = command
_M.count_option = count_option
_M.EXIT_NONCONFORMING = EXIT_NONCONFORMING
_M.usage_line = usage_line
_M.help_text = help_text
_M.parse = parse
_M.check_args = check_args
_M.timeout_option = timeout_option

return _M

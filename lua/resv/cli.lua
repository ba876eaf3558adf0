-- resv.cli: the `resv` command (bin/resv; docs/design.md section 13), what an
-- operator needs on a store named by --uri (MongoDB) or --path (the file
-- store): look at a key, release a stuck one, and the other subcommands
-- that `resv --help` lists. main runs a command line; the rest is in
-- lua/resv/cli/:
--   args.lua      the command table, the names and numbers of arguments
--                 and options, the usage line, the help and its table of
--                 exit codes, argv split up;
--   output.lua    the lines for people and the JSON of --json;
--   commands.lua  get, release, types, sweep, ls, check and stats, each
--                 a row of the command table run on the store main opens;
--   copy.lua      copy, which opens its own two stores.
--
-- Bad arguments are answered with the usage line on stderr and exit code
-- 2, before any store is opened; an error of the store with its
-- "<code>: <message>" and exit code 1. Output is for people by default;
-- --json prints one JSON document per answer on its own line instead.
--
-- Every store is opened with no_create: no subcommand makes a store, a
-- type or a collection (copy's --to store excepted), so a name typed
-- wrong is an error that names it, never a new empty thing.
local resv = require "resv"
local cmdline = require "resv.cli.args"
local output = require "resv.cli.output"
local commands = require "resv.cli.commands"
local copy = require "resv.cli.copy"

local io = io
local type = type
local tostring = tostring

local usage_error = cmdline.usage_error
local is_usage_error = cmdline.is_usage_error
local usage_line = cmdline.usage_line
local help_text = cmdline.help_text
local parse = cmdline.parse
local check_args = cmdline.check_args
local timeout_option = cmdline.timeout_option

local _M = {}

-- Opens the store the options name, with the command's own store options
-- (cmd.store_options) from its options cmd_opts, the deadline timeout_ms
-- (nil: the library's) and no_create.
local function open_store(opts, cmd, cmd_opts, timeout_ms)
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
  o.timeout_ms, o.no_create = timeout_ms, true
  local store
  store, err = resv.open(o)
  if not store then return nil, err end
  return store
end

-- Runs the command line argv (the script's arg table) with output to out
-- and messages to errout (io.stdout and io.stderr by default). Returns
-- the exit code of the table EXIT_CODES (args.lua).
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
  if ctx.opts.version then
    out:write("resv ", resv._VERSION, "\n")
    return 0
  end
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
  ctx.timeout_ms, err = timeout_option(ctx.opts)
  if not err then
    ctx.checked, err = check_args(cmd, ctx.args, ctx.cmd_opts)
  end
  if not err and not cmd.opens_itself then
    store, err = open_store(ctx.opts, cmd, ctx.cmd_opts, ctx.timeout_ms)
  end
  local ok = not err and (store or cmd.opens_itself)
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
  if is_usage_error(err) then
    errout:write("resv: ", err.msg, "\n", usage_line(cmd), "\n")
    return 2
  end
  errout:write("resv: ", tostring(err), "\n")
  return 1
end

-- For subcommands defined elsewhere and the tests.
_M.command = cmdline.command
_M.usage_error = usage_error
_M.parse_key = cmdline.parse_key
_M.parse_owner = cmdline.parse_owner
_M.count_option = cmdline.count_option
_M.key_text = output.key_text
_M.answer_text = output.answer_text
_M.instant_text = output.instant_text
_M.integer_text = output.integer_text
_M.json = output.json
_M.emit = output.emit
_M.open_type = commands.open_type
_M.copy_stores = copy.copy_stores
require("resv.cli.recover")(_M)

return _M

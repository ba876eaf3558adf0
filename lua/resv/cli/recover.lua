-- resv.cli.recover: the `resv recover --path DIR` subcommand of resv.cli
-- (which loads this file): a file store refused at open as damaged (by a
-- crash of the OS, with sync = "process"; or a missing or empty data.mdb
-- beside its resv.state) has its files moved into a new sibling directory
-- <DIR>.crashed-<UTC time>, so that the next open starts an empty store.
local resv = require "resv"

return function(cli)
  cli.command("recover", {
    args = "",
    min = 0, max = 0,
    opens_itself = true,
    summary = "move a file store that open refuses as damaged aside",
    help = [[
For a file store (--path DIR) that open refuses as damaged: a store with
sync = "process" whose last commits came after its last checkpoint, in an
earlier boot (a crash of the OS), or one whose data.mdb is missing or
empty beside its resv.state. Moves its files (data.mdb, lock.mdb,
resv.state) into a new directory DIR.crashed-<UTC time> beside DIR and
prints where; the next open of DIR starts an empty store. A store that
opens as it is stays untouched ("nothing to recover"). No process may
have the store open.]],
    run = function(ctx)
      local path = ctx.opts.path
      if not path or ctx.opts.uri then
        return nil, cli.usage_error("recover is for a file store: name it with --path DIR")
      end
      local kept, err = resv.recover(path)
      if kept == nil then return nil, err end
      if kept then
        cli.emit(ctx, { path = path, kept = kept, moved = true },
                 "recover: moved the files of " .. path .. " (data.mdb, lock.mdb, resv.state) to "
                 .. kept .. "; " .. path .. " now opens as an empty store")
      else
        cli.emit(ctx, { path = path, moved = false },
                 "recover: nothing to recover: " .. path .. " opens as it is")
      end
      return true
    end,
  })
end

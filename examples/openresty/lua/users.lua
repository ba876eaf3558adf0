-- users.lua: the store opened on first use, in whatever Lua VM runs the
-- request. The pattern for `lua_code_cache off` (development), where every
-- request runs in a Lua VM of its own and sees nothing init_worker_by_lua
-- set: each VM opens the store on its first call. With the file store all
-- of them share the one store in the directory (a process opens its LMDB
-- environment once, however many VMs open it); with MongoDB each VM gets
-- its own connections, fine for development only. With the code cache on
-- (production) the store opens once per worker, at its first request.
--
--   local users, err = require("users").get("/var/lib/app/resv")
--   if not users then return ngx.exit(503) end
local resv = require "resv"

local _M = {}
local users

function _M.get(path)
  if users == nil then
    local store, err = resv.open { path = path }
    if not store then
      ngx.log(ngx.ERR, "resv: ", err)
      return nil, err
    end
    users = assert(store:type("shop", "user"))
  end
  return users
end

return _M

-- bench/gateway/bench_dict.lua: the gateway's sign-up on ngx.shared.DICT.
--
-- The baseline a gateway team would otherwise reach for: the same request
-- as /signup (read the JSON body, check both fields, the account service's
-- subrequest, a JSON 201), with the e-mail and the user name taken by
-- ngx.shared.signups:add (one per host, kept in memory, gone at a restart;
-- no pending state, no confirm).
local noop = require "bench_noop"

local _M = {}

function _M.run()
  local email, username = noop.read_signup()
  if not email then
    return
  end
  local dict = ngx.shared.signups
  local id = "user-" .. ngx.var.request_id
  if not dict:add("email:" .. email, id, 30) then
    ngx.status = 409
    return ngx.say('{"error":"taken","field":"email"}')
  end
  if not dict:add("username:" .. username, id, 30) then
    dict:delete("email:" .. email)
    ngx.status = 409
    return ngx.say('{"error":"taken","field":"username"}')
  end
  noop.create(id, email, username)
end

return _M

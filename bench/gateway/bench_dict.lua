-- bench/gateway/bench_dict.lua: the gateway's sign-up on ngx.shared.DICT.
--
-- The baseline a gateway team would otherwise reach for: the same request
-- as /signup (read the JSON body, check both fields, the account service's
-- subrequest, a JSON 201), with the e-mail and the user name taken by
-- ngx.shared.signups:add (one per host, kept in memory, gone at a restart;
-- no pending state, no confirm).
local json = require "dkjson"

local _M = {}

function _M.run()
  ngx.req.read_body()
  local body = json.decode(ngx.req.get_body_data() or "", 1, nil)
  if type(body) ~= "table" or type(body.email) ~= "string"
     or type(body.username) ~= "string" then
    ngx.status = 400
    ngx.say('{"error":"bad body"}')
    return
  end
  local dict = ngx.shared.signups
  local id = "user-" .. ngx.var.request_id
  if not dict:add("email:" .. body.email, id, 30) then
    ngx.status = 409
    return ngx.say('{"error":"taken","field":"email"}')
  end
  if not dict:add("username:" .. body.username, id, 30) then
    dict:delete("email:" .. body.email)
    ngx.status = 409
    return ngx.say('{"error":"taken","field":"username"}')
  end
  local res = ngx.location.capture("/_account", {
    method = ngx.HTTP_POST,
    body = json.encode { id = id, email = body.email, username = body.username },
  })
  ngx.status = res.status == 201 and 201 or 502
  ngx.header["Content-Type"] = "application/json"
  ngx.say(json.encode { id = id, email = body.email, username = body.username })
end

return _M

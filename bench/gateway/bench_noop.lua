-- bench/gateway/bench_noop.lua: the gateway's sign-up without the store.
--
-- The baseline of the gateway benchmark: the same request as /signup (read
-- the JSON body, check both fields, the account service's subrequest, a
-- JSON 201) but no reservation, so the difference between the two is what
-- resv costs a sign-up: reserve the e-mail and the user name, confirm both.
local json = require "dkjson"

local _M = {}

-- The sign-up's body, checked: email, username; or nil after a 400.
function _M.read_signup()
  ngx.req.read_body()
  local body = json.decode(ngx.req.get_body_data() or "", 1, nil)
  if type(body) ~= "table" or type(body.email) ~= "string"
     or type(body.username) ~= "string" then
    ngx.status = 400
    ngx.say('{"error":"bad body"}')
    return nil
  end
  return body.email, body.username
end

-- The account service's subrequest and the JSON reply.
function _M.create(id, email, username)
  local res = ngx.location.capture("/_account", {
    method = ngx.HTTP_POST,
    body = json.encode { id = id, email = email, username = username },
  })
  ngx.status = res.status == 201 and 201 or 502
  ngx.header["Content-Type"] = "application/json"
  ngx.say(json.encode { id = id, email = email, username = username })
end

function _M.run()
  local email, username = _M.read_signup()
  if email then
    _M.create("user-" .. ngx.var.request_id, email, username)
  end
end

return _M

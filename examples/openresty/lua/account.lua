-- account: a stand-in for the service that creates accounts, the
-- gateway's upstream. POST /accounts with a JSON object {id, email,
-- username} answers 201, or 500 when the user name starts with "fail", so
-- tests and the demo can make a sign-up fail after its reservations.
local json = require "dkjson"

local ngx = ngx

local _M = {}

function _M.create()
  ngx.req.read_body()
  local account = json.decode(ngx.req.get_body_data() or "")
  ngx.header["Content-Type"] = "application/json"
  if type(account) ~= "table" or type(account.username) ~= "string" then
    ngx.status = 400
    ngx.say('{"error":"expected {id, email, username}"}')
    return
  end
  if account.username:lower():sub(1, 4) == "fail" then
    ngx.status = 500
    ngx.say('{"error":"account service failed on purpose"}')
    return
  end
  ngx.status = 201
  ngx.say(json.encode { id = account.id, created = true })
end

return _M

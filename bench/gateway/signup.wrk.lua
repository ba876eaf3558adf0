-- bench/gateway/signup.wrk.lua: wrk script posting sign-ups, each with an
-- e-mail address and a user name no other request uses, so every sign-up
-- reserves two free keys (and succeeds: 201). wrk gives each thread its own
-- Lua state; setup() numbers them so their values never meet.
local counter = 0
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function request()
  counter = counter + 1
  local name = string.format("w%s-%d-%d", os.getenv("WRK_RUN") or "0", tid or 0, counter)
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" },
                    '{"email":"' .. name .. '@example.com","username":"' .. name .. '"}')
end

-- resv.host: the host this Lua state runs in, decided once when this module
-- loads, and the waiter a call that must not block uses there.
--
-- The hosts: OpenResty (a global `ngx` with ngx.get_phase: resv.ngx),
-- Tarantool (a global `_TARANTOOL` and its fiber module: resv.tarantool),
-- and any other (no waiter: a call outside resv.spawn blocks in C). Only
-- the waiter of the host found is loaded. It must not decide anything per
-- call, nor load another host's module.
--
-- A waiter is a table of functions:
--   usable()           true when the running code may wait by yielding
--                      now (OpenResty: in a phase whose coroutine may
--                      yield);
--   present()          true when nothing in this host may block (resv's
--                      close then stops the store without waiting);
--   inbox()            the inbox to submit a job to, or nil: then wait's
--                      in_inbox is false;
--   wait(job, in_inbox) true once the job is done, false once its
--                      deadline plus grace (resv_job_deadline) passed;
--   check_pool()       optional: said when a store whose calls wait opens.
-- `waiter` is one table for the life of the Lua state, so a module may
-- keep it in a local; _use fills it again, for tests.
local rawget = rawget
local pairs = pairs
local require = require

local PLAIN = {
  usable = function() return false end,
  present = function() return false end,
}

local function found()
  local ngx = rawget(_G, "ngx")
  if ngx ~= nil and ngx.get_phase ~= nil then
    return require "resv.ngx", "ngx"
  end
  if rawget(_G, "_TARANTOOL") ~= nil then
    local tnt = require "resv.tarantool"
    if tnt.usable() then
      return tnt, "tarantool"
    end
  end
  return PLAIN, "plain"
end

local _M = { waiter = {} }

-- Makes w (nil: the waiter of the host found) the waiter in use.
local function use(w, name)
  local waiter = _M.waiter
  for k in pairs(waiter) do
    waiter[k] = nil
  end
  for k, v in pairs(w) do
    waiter[k] = v
  end
  _M.name = name
end

use(found())

-- For tests outside a host: w's functions instead of the host's (nil:
-- the host found again).
function _M._use(w, name)
  if w == nil then
    use(found())
  else
    use(w, name)
  end
end

return _M

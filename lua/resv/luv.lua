-- resv.luv: resv in a libuv loop (luv, Neovim's vim.loop; docs/design.md section 14).
--
--   local uv = require "luv"
--   local watcher = require("resv.luv").start(uv)
--   watcher.spawn(function()            -- resv.spawn, then the watcher re-arms
--     local r, err = users:reserve(key, owner, "signup-1", 30000)
--     ...
--   end)
--   uv.run()                            -- returns once nothing is pending
--
-- In Neovim: require("resv.luv").neovim() (the same, on vim.loop, with
-- every resume passed through vim.schedule).
--
-- A poll handle watches resv.fd() (readable while answers wait) and calls
-- resv.poll(), which resumes the spawned coroutines whose answers are ready;
-- a timer fires at resv.timeout(), the next waiting call's deadline, so a
-- call past its deadline is resumed with `timeout` even if no answer comes.
-- Both run only while spawned coroutines are pending, so a plain luv
-- script's uv.run() returns when the work is done. A spawned coroutine that
-- yields on its own (coroutine.yield(): "wait one frame" in a game loop) is
-- resumed on the loop's next turn.
--
-- Neovim runs luv callbacks in its "fast" context, where most of vim.api
-- fails (E5560). With opts.schedule (vim.schedule for neovim()) the
-- callbacks only stop the handles and schedule the poll, so every resumed
-- coroutine runs in Neovim's main loop, where vim.api works; the handles
-- are armed again after it.
--
-- opts.on_failure(traceback) gets an error raised in a spawned coroutine
-- (default: written to io.stderr).
local resv = require "resv"
local sched = require "resv.sched"

local io = io
local type = type
local error = error

local _M = {}

local function default_failure(traceback)
  io.stderr:write("resv: ", traceback, "\n")
end

function _M.start(uv, opts)
  if type(uv) ~= "table" or type(uv.new_poll) ~= "function" then
    error("resv.luv.start: expected luv's module (require \"luv\" or vim.loop)", 2)
  end
  opts = opts or {}
  local schedule = opts.schedule
  local on_failure = opts.on_failure or default_failure
  local fd, err = resv.fd()
  if fd == nil then
    return nil, err
  end
  local poll = uv.new_poll(fd)
  local timer = uv.new_timer()
  local watcher = {}
  local scheduled, stopped, polling = false, false, false
  local on_event

  -- Starts the handles for what is pending, or stops them when nothing is.
  local function arm()
    if stopped or scheduled then
      return
    end
    if resv.pending() == 0 then
      if polling then
        poll:stop()
        polling = false
      end
      timer:stop()
      return
    end
    if not polling then
      poll:start("r", on_event)
      polling = true
    end
    -- A coroutine that yielded on its own waits for the next turn.
    local ms = sched.turn_pending() and 0 or resv.timeout()
    if ms then
      timer:start(ms, 0, on_event)
    else
      timer:stop()
    end
  end

  local function pump()
    scheduled = false
    if stopped then
      return
    end
    local _, failures = resv.poll()
    if failures then
      for i = 1, #failures do
        on_failure(failures[i])
      end
    end
    arm()
  end

  on_event = function(poll_err)
    if type(poll_err) == "string" then
      on_failure("resv.luv: polling resv.fd() failed: " .. poll_err)
    end
    if schedule == nil then
      pump()
    elseif not scheduled then
      scheduled = true
      -- Level-triggered: the descriptor stays readable until the poll, so
      -- the handle must rest until the scheduled poll has run.
      poll:stop()
      polling = false
      timer:stop()
      schedule(pump)
    end
  end

  -- resv.spawn(fn, ...), then the handles are armed for its wait.
  function watcher.spawn(fn, ...)
    local co = resv.spawn(fn, ...)
    arm()
    return co
  end

  -- Arms the handles after coroutines were spawned with resv.spawn itself.
  watcher.arm = arm

  -- Stops watching and closes the handles.
  function watcher.stop()
    if not stopped then
      stopped = true
      poll:stop()
      timer:stop()
      poll:close()
      timer:close()
    end
  end

  arm()
  return watcher
end

-- Neovim: the watcher on vim.loop, every poll scheduled into the main loop.
function _M.neovim(opts)
  local vim = opts and opts.vim or _G.vim
  if type(vim) ~= "table" or type(vim.schedule) ~= "function" then
    error("resv.luv.neovim: not running in Neovim", 2)
  end
  local o = { schedule = vim.schedule, on_failure = opts and opts.on_failure }
  return _M.start(vim.loop, o)
end

return _M

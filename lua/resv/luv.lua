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

-- A watcher's state: uv's poll and timer handles, opts' schedule and
-- on_failure, and whether a poll is scheduled, the handles are stopped
-- for good, the poll handle is started.

-- Starts the handles for what is pending, or stops them when nothing is.
local function arm(w)
  if w.stopped or w.scheduled then
    return
  end
  if resv.pending() == 0 then
    if w.polling then
      w.poll:stop()
      w.polling = false
    end
    w.timer:stop()
    return
  end
  if not w.polling then
    w.poll:start("r", w.on_event)
    w.polling = true
  end
  -- A coroutine that yielded on its own waits for the next turn.
  local ms = sched.turn_pending() and 0 or resv.timeout()
  if ms then
    w.timer:start(ms, 0, w.on_event)
  else
    w.timer:stop()
  end
end

local function pump(w)
  w.scheduled = false
  if w.stopped then
    return
  end
  local _, failures = resv.poll()
  if failures then
    for i = 1, #failures do
      w.on_failure(failures[i])
    end
  end
  arm(w)
end

local function on_event(w, poll_err)
  if type(poll_err) == "string" then
    w.on_failure("resv.luv: polling resv.fd() failed: " .. poll_err)
  end
  if w.schedule == nil then
    pump(w)
  elseif not w.scheduled then
    w.scheduled = true
    -- Level-triggered: the descriptor stays readable until the poll, so
    -- the handle must rest until the scheduled poll has run.
    w.poll:stop()
    w.polling = false
    w.timer:stop()
    w.schedule(w.pump)
  end
end

function _M.start(uv, opts)
  if type(uv) ~= "table" or type(uv.new_poll) ~= "function" then
    error("resv.luv.start: expected luv's module (require \"luv\" or vim.loop)", 2)
  end
  opts = opts or {}
  local fd, err = resv.fd()
  if fd == nil then
    return nil, err
  end
  local w = {
    poll = uv.new_poll(fd), timer = uv.new_timer(),
    schedule = opts.schedule, on_failure = opts.on_failure or default_failure,
    scheduled = false, stopped = false, polling = false,
  }
  w.on_event = function(poll_err) on_event(w, poll_err) end
  w.pump = function() pump(w) end
  local watcher = {}

  -- resv.spawn(fn, ...), then the handles are armed for its wait.
  function watcher.spawn(fn, ...)
    local co = resv.spawn(fn, ...)
    arm(w)
    return co
  end

  -- Arms the handles after coroutines were spawned with resv.spawn itself.
  function watcher.arm()
    arm(w)
  end

  -- Stops watching and closes the handles.
  function watcher.stop()
    if not w.stopped then
      w.stopped = true
      w.poll:stop()
      w.timer:stop()
      w.poll:close()
      w.timer:close()
    end
  end

  arm(w)
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

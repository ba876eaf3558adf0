-- resv in a real Neovim (Debian's neovim, headless) with resv.luv.neovim():
-- calls that wait on the server never stall a 10 ms vim.loop timer, and
-- the code after each call runs in Neovim's main loop (vim.api works
-- there; in luv's fast context nvim_set_var fails with E5560). Run from
-- the repository root against the emulator:
--   RESV_CPATH="build/?.so" scripts/with-mongo nvim --headless -u NONE -c 'luafile spec/hosts/nvim_test.lua'
-- Prints one line per check and "N passed, M failed"; exits 1 on a failure.
package.path = "lua/?.lua;lua/?/init.lua;spec/hosts/?.lua;" .. package.path
package.cpath = (os.getenv("RESV_CPATH") or "build/?.so") .. ";" .. package.cpath

local vim = vim
local common = require "common"
local resv = require "resv"
local resv_luv = require "resv.luv"

local check = common.check

local function main()
  local store, t, app = common.open("nvim")
  local meter = common.meter()
  local ticker = vim.loop.new_timer()
  ticker:start(common.TICK_MS, common.TICK_MS, meter.tick)

  -- 1. 20 tasks waiting 600 ms on the server; after each call the task
  -- sets a Neovim variable, which only works outside the fast context.
  local failures = {}
  local watcher = resv_luv.neovim { on_failure = function(f) failures[#failures + 1] = f end }
  local N = 20
  local work = common.workload(t, app, N)
  local fast, set = 0, 0
  meter.reset()
  local started = common.clock()
  for i = 1, N do
    watcher.spawn(function()
      work.task(i)
      if vim.in_fast_event() then fast = fast + 1 end
      vim.api.nvim_set_var("resv_task_" .. i, true)
      set = set + 1
    end)
  end
  vim.wait(20000, function() return resv.pending() == 0 end, 5)
  local took = common.clock() - started
  check("20 tasks x 3 calls answer right", work.done() == N and work.right() == N,
        ("%d done, %d right in %d ms"):format(work.done(), work.right(), took))
  check("the calls did wait on the server", took >= common.BLOCK_MS, took .. " ms")
  check("a 10 ms vim.loop timer keeps ticking while they wait", meter.worst() < common.STALL_LINE_MS,
        ("worst tick %.0f ms late"):format(meter.worst()))
  check("the code after each call runs outside the fast context (vim.api works)",
        fast == 0 and set == N and #failures == 0 and vim.g.resv_task_7 == true,
        ("%d in fast context, %d variables set, %d failures %s"):format(fast, set, #failures,
        failures[1] and failures[1]:match("[^\n]*") or ""))
  watcher.stop()

  -- 2. The control for 4: the plain luv watcher (no vim.schedule) resumes
  -- in the fast context, where nvim_set_var fails.
  local raw_failures = {}
  local raw = resv_luv.start(vim.loop, { on_failure = function(f) raw_failures[#raw_failures + 1] = f end })
  common.block(app, 1, 100)
  local raw_fast
  raw.spawn(function()
    t:reserve({ namespace = "n", key = "raw" }, { id = "o" }, "x", 60000)
    raw_fast = vim.in_fast_event()
    vim.api.nvim_set_var("resv_raw", true)
  end)
  vim.wait(10000, function() return resv.pending() == 0 end, 5)
  check("the control: without vim.schedule the code resumes in the fast context and vim.api fails",
        raw_fast == true and #raw_failures == 1 and raw_failures[1]:match("E5560") ~= nil,
        raw_failures[1] and raw_failures[1]:match("[^\n]*"))
  raw.stop()

  -- 3. The control for 3: a blocking call in the main loop stalls it.
  common.block(app, 1, common.BLOCK_MS)
  local answered
  meter.reset()
  vim.schedule(function() answered = common.blocking_call(t) end)
  vim.wait(10000, function() return answered ~= nil end, 5)
  check("the control: a blocking call does stall the loop",
        answered and answered.status == "reserved" and meter.worst() > common.STALL_LINE_MS,
        ("worst tick %.0f ms late"):format(meter.worst()))

  ticker:stop()
  ticker:close()
  store:close()
end

local ok, err = pcall(main)
if not ok then check("the test ran to the end", false, tostring(err)) end
vim.cmd(common.finish() and "qall!" or "cquit! 1")

-- resv in Neovim: reserve a name without freezing the editor. The code
-- after the call runs in Neovim's main loop, so vim.api works there.
--
--   RESV_CPATH="build/?.so" nvim --headless -u NONE -c 'luafile examples/hosts/nvim.lua'
--   (in a config: package.cpath/package.path naming the build and lua/)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("RESV_CPATH") or "build/?.so") .. ";" .. package.cpath

local resv = require "resv"
local watcher = require("resv.luv").neovim()

local store = assert(resv.open { uri = os.getenv("RESV_TEST_URI") })
local names = assert(store:type("editor", "session"))

watcher.spawn(function()
  local key = { namespace = "name", key = "session-" .. vim.loop.hrtime() }
  local r, err = names:reserve(key, { id = vim.fn.getpid() .. "" }, "open", 30000)
  -- Not in luv's fast context: vim.api and vim.fn work here.
  vim.api.nvim_set_var("resv_session", r and r.status or err)
  print("reserved: " .. tostring(vim.g.resv_session))
end)

vim.wait(10000, function() return resv.pending() == 0 end)
store:close()
if #vim.api.nvim_list_uis() == 0 then vim.cmd("qall!") end

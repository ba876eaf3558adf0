-- The examples run to the end (each asserts its own outcome).
local helpers = require "spec.helpers"

-- Runs a script in a fresh LuaJIT; true when it exits 0, and its output.
-- (LuaJIT's pipe close does not give the status: the shell prints it.)
local function run(script, uri)
  local cmd = "LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit " .. script
              .. (uri and (" '" .. uri .. "'") or "") .. " 2>&1; echo \"exit=$?\""
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return out:match("exit=0%s*$") ~= nil, out
end

for _, backend in ipairs(helpers.backends()) do
  describe("examples on " .. backend.name, function()
    local uri = backend.options.uri
    for _, script in ipairs { "examples/script.lua", "examples/game_loop.lua" } do
      it(script .. " runs to the end", function()
        local ok, out = run(script, uri)
        assert(ok, out)
      end)
    end
    if uri then
      -- Two runs in the same second against one server (os.time() pinned
      -- to one value for both): each run's names are its own. With a run
      -- id from os.time() the second run found its names confirmed.
      it("examples/game_loop.lua runs twice within one second against one server", function()
        local script = "-e 'os.time = function() return 1700000000 end' examples/game_loop.lua"
        local ok1, out1 = run(script, uri)
        local ok2, out2 = run(script, uri)
        assert(ok1, out1)
        assert(ok2, out2)
      end)
    end
  end)
end

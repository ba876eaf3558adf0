-- The LÖVE example (examples/love) in Debian's LÖVE 11.4, headless (no
-- window, no graphics: RESV_LOVE_HEADLESS=1): packaged as a game folder, a
-- .love and a fused game, each with libresv.so beside it as README "LÖVE"
-- says, each started from another folder with no LUA_PATH or LUA_CPATH;
-- against the emulator its players' calls wait 600 ms on the server and no
-- frame waits for them, while the control (the same calls in love.update,
-- --blocking) makes frames 600 ms long. Run from the repository root:
--   RESV_BUILD=build LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" scripts/with-mongo luajit spec/hosts/love_test.lua
-- Prints one line per check and "N passed, M failed"; exits 1 on a failure.
package.path = "lua/?.lua;lua/?/init.lua;spec/hosts/?.lua;" .. package.path

local common = require "common"
local check = common.check

local build = os.getenv("RESV_BUILD") or "build"

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The three ways a game ships (README "LÖVE").
local tmp = io.popen("mktemp -d"):read("*l")
local game, dist, fused = tmp .. "/game", tmp .. "/dist", tmp .. "/fused"
local love_exe = io.popen("readlink -f \"$(command -v love)\""):read("*l")
assert(sh(table.concat({
  "set -e",
  "mkdir -p " .. q(game .. "/resv") .. " " .. q(dist) .. " " .. q(fused),
  "cp examples/love/main.lua examples/love/conf.lua lua/resv.lua " .. q(game),
  "cp lua/resv/*.lua " .. q(game .. "/resv"),
  -- The .love holds only Lua files (a C library cannot load from a zip).
  "(cd " .. q(game) .. " && /usr/bin/python3 -c 'import sys, zipfile, os; z = zipfile.ZipFile(sys.argv[1], \"w\"); "
    .. "[z.write(os.path.join(d, f)) for d, _, fs in os.walk(\".\") for f in fs]; z.close()' "
    .. q(dist .. "/names.love") .. ")",
  "cp " .. q(build .. "/libresv.so") .. " " .. q(game),
  "cp " .. q(build .. "/libresv.so") .. " " .. q(dist),
  "cat " .. q(love_exe) .. " " .. q(dist .. "/names.love") .. " > " .. q(fused .. "/names"),
  "chmod +x " .. q(fused .. "/names"),
  "cp " .. q(build .. "/libresv.so") .. " " .. q(fused),
}, " && ")), "packaging the game failed")

-- Runs a game from /tmp's parent folder with only its own files: the
-- summary line's fields and the exit status.
local function play(what, args)
  local cmd = "cd / && env -u LUA_PATH -u LUA_CPATH RESV_LOVE_HEADLESS=1 XDG_RUNTIME_DIR=" .. q(tmp)
              .. " timeout 60 " .. what .. " " .. args .. " 2>" .. q(tmp .. "/stderr") .. "; echo \"exit=$?\""
  local out = io.popen(cmd):read("*a")
  local frames, worst, taken, refused, errors = out:match(
    "frames=(%d+) worst_frame_ms=(%d+) taken=(%d+) refused=(%d+) errors=(%d+)")
  local result = { exit = tonumber(out:match("exit=(%d+)")), frames = tonumber(frames),
                   worst = tonumber(worst), taken = tonumber(taken), refused = tonumber(refused),
                   errors = tonumber(errors) }
  local f = io.open(tmp .. "/stderr")
  result.stderr = f and f:read("*a"):gsub("[^\n]*XDG_RUNTIME_DIR[^\n]*\n?", "") or ""
  if f then f:close() end
  result.text = out .. result.stderr:sub(1, 600)
  return result
end

local function summary(r)
  return ("exit %s, %s frames, longest %s ms, %s taken, %s refused, %s errors%s"):format(
    tostring(r.exit), tostring(r.frames), tostring(r.worst), tostring(r.taken), tostring(r.refused),
    tostring(r.errors), r.exit ~= 0 and (": " .. r.text) or "")
end

-- 1. Each way of shipping finds the library and plays on the memory store.
local r = play("love " .. q(game), "--players 16")
check("a game folder finds libresv.so in it (memory store)", r.exit == 0 and r.taken == 4, summary(r))
r = play("love " .. q(dist .. "/names.love"), "--players 16")
check("a .love finds libresv.so beside it (memory store)", r.exit == 0 and r.taken == 4, summary(r))
r = play(q(fused .. "/names"), "--players 16")
check("a fused game finds libresv.so beside it (memory store)", r.exit == 0 and r.taken == 4, summary(r))

-- 2. On MongoDB, the calls held 600 ms by the server: no frame waits.
if common.uri and common.uri ~= "" then
  local app = "love" .. tostring(os.time()) .. tostring(math.random(1, 1e6))
  local uri = common.uri .. (common.uri:find("?", 1, true) and "&" or "?") .. "appname=" .. app
  common.block(app, 16, common.BLOCK_MS)
  r = play("love " .. q(dist .. "/names.love"), q(uri) .. " --players 16")
  check("on MongoDB, 16 players' picks answer right", r.exit == 0 and r.taken == 4 and r.refused == 12,
        summary(r))
  check("no frame waits for a call", r.worst ~= nil and r.worst < common.STALL_LINE_MS,
        ("longest frame %s ms (calls held %d ms)"):format(tostring(r.worst), common.BLOCK_MS))

  -- The control: the same calls in love.update itself block frames.
  common.block(app, 16, common.BLOCK_MS)
  r = play("love " .. q(dist .. "/names.love"), q(uri) .. " --players 16 --blocking")
  check("the control: blocking calls in love.update make long frames",
        r.exit == 0 and r.worst ~= nil and r.worst > common.STALL_LINE_MS,
        ("longest frame %s ms"):format(tostring(r.worst)))
end

sh("rm -rf " .. q(tmp))
os.exit(common.finish() and 0 or 1)

-- A tiny LÖVE game: players reserve unique names while the frames go on.
--
-- Each player's pick runs in a coroutine of resv.spawn: a call there yields
-- while libresv's threads do the MongoDB round trip, and resv.poll(), once
-- per frame in love.update, resumes the picks whose answers are ready. No
-- frame waits for the database.
--
--   love <game> [mongodb-uri] [--players N] [--blocking]
--
-- No URI: the in-memory store. --players N: N players pick among N/4 names,
-- then the game prints a summary line (frames, the longest frame, names
-- taken) and quits (0 when every answer was right). --blocking makes the
-- same calls in love.update itself, outside resv.spawn: each then blocks a
-- frame (the tests' control).
--
-- Where resv is found (README, "LÖVE"): its Lua files (resv.lua, resv/)
-- at the game's root, which love's require reads from a folder or a .love;
-- libresv.so, which no one can load from inside a .love, in the game folder
-- or in the folder holding the game folder, the .love or the fused game.
-- LUA_PATH and LUA_CPATH still count (running from the source tree).
local fs = love.filesystem

local function find_libresv()
  local source = fs.getSource()
  local probe = io.open(source .. "/main.lua")  -- a folder game, not a .love
  if probe then
    probe:close()
    package.cpath = source .. "/?.so;" .. package.cpath
  end
  package.cpath = package.cpath .. ";" .. fs.getSourceBaseDirectory() .. "/?.so"
end
find_libresv()

local resv = require "resv"

local store, names
local uri, players_wanted, blocking, report
local run_id
local frames, worst_ms = 0, 0
local started, done = 0, 0
local taken, refused, failed = 0, 0, 0
local shown = {}     -- lines for love.draw

local function random_id()
  local f = io.open("/dev/urandom", "rb")
  if not f then return tostring(os.time()) end
  local bytes = f:read(6)
  f:close()
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- One player's pick: reserve the name, then (the profile saved) confirm.
local function pick(player, name)
  local key = { namespace = "name", key = name .. "-" .. run_id }
  local owner = { id = "player-" .. player }
  local r, err = names:reserve(key, owner, "pick", 10000)
  if not r then
    failed = failed + 1
    shown[#shown + 1] = ("player %d: %s"):format(player, err)
  elseif r.status == "reserved" then
    local c = names:confirm(key, owner, 1)
    if c and c.status == "confirmed" then
      taken = taken + 1
      shown[#shown + 1] = ("player %d is %s"):format(player, name)
    else
      failed = failed + 1
    end
  else
    refused = refused + 1
  end
  done = done + 1
end

function love.load(args)
  for i = 1, #args do
    local a = args[i]
    if a == "--players" then players_wanted, report = tonumber(args[i + 1]), true
    elseif a == "--blocking" then blocking = true
    elseif a:match("^mongodb") then uri = a
    end
  end
  run_id = random_id()
  store = assert(resv.open { uri = uri, threads = 8 })
  names = assert(store:type("game", "player"))
  players_wanted = players_wanted or 8
end

function love.update(dt)
  frames = frames + 1
  if frames > 1 then
    worst_ms = math.max(worst_ms, dt * 1000)
  end
  -- This frame's new players: two at a time.
  for _ = 1, 2 do
    if started < players_wanted then
      started = started + 1
      local name = "hero" .. (started % math.max(1, math.floor(players_wanted / 4)))
      if blocking then
        pick(started, name)
      else
        resv.spawn(pick, started, name)
      end
    end
  end
  local _, failures = resv.poll()
  for _, f in ipairs(failures or {}) do
    failed = failed + 1
    io.stderr:write(f, "\n")
  end
  if done == players_wanted and started == players_wanted and report then
    print(("frames=%d worst_frame_ms=%.0f taken=%d refused=%d errors=%d"):format(
      frames, worst_ms, taken, refused, failed))
    local names_n = math.max(1, math.floor(players_wanted / 4))
    local right = taken == names_n and refused == players_wanted - names_n and failed == 0
    store:close()
    love.event.quit(right and 0 or 1)
  end
end

function love.draw()
  if not love.graphics then return end
  love.graphics.print(("frame %d, longest %.0f ms; %d taken, %d refused"):format(
    frames, worst_ms, taken, refused), 10, 10)
  for i, line in ipairs(shown) do
    love.graphics.print(line, 10, 20 + 14 * i)
  end
end

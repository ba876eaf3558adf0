-- A game loop: players pick unique names while the frame goes on.
--
--   LUA_CPATH="build/?.so;;" LUA_PATH="lua/?.lua;;" luajit examples/game_loop.lua
--   ... luajit examples/game_loop.lua mongodb://127.0.0.1:27017/game
--   ... scripts/with-mongo sh -c 'luajit examples/game_loop.lua "$RESV_TEST_URI"'
--
-- Each request runs in a coroutine of resv.spawn. A call there yields while
-- the MongoDB round trip runs on libresv's threads; resv.poll(), called
-- once per frame, resumes every coroutine whose answer is ready and returns
-- at once, so the frame never waits for the database. (On the in-memory
-- store every call answers at once and nothing waits at all.)
local ffi = require "ffi"
local resv = require "resv"

ffi.cdef [[ int poll(void *fds, unsigned long nfds, int timeout); ]]
local function sleep_ms(ms) ffi.C.poll(nil, 0, ms) end

local uri = arg and arg[1]
local store = assert(resv.open { uri = uri, threads = 4 })
local names = assert(store:type("game", "player"))
-- Names are unique per run, so runs against one server never meet: an id
-- from the kernel's random bytes (os.time() repeats within a second).
local function random_id()
  local f = io.open("/dev/urandom", "rb")
  if not f then
    return string.format("%d-%d", os.time(), math.random(1, 2^31))
  end
  local bytes = f:read(8)
  f:close()
  return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
local run_id = random_id()

local PLAYERS, NAMES = 200, 40
local taken, refused, failed, in_flight = 0, 0, 0, 0

-- One player's attempt at a name: reserve, then confirm or give up.
local function pick_name(player, name)
  in_flight = in_flight + 1
  local key = { namespace = "name", key = name .. "-" .. run_id }
  local owner = { id = "player-" .. player }
  local r, err = names:reserve(key, owner, "pick-" .. player, 10000)
  if not r then
    failed = failed + 1
  elseif r.status == "reserved" then
    -- The player's profile is saved here; then the name is theirs.
    local c = assert(names:confirm(key, owner, 1))
    assert(c.status == "confirmed")
    taken = taken + 1
  else
    refused = refused + 1 -- somebody else has it
  end
  in_flight = in_flight - 1
end

local frame = 0
local started = 0
while true do
  frame = frame + 1

  -- This frame's new requests: a few players at a time.
  for _ = 1, 10 do
    if started < PLAYERS then
      started = started + 1
      resv.spawn(pick_name, started, "hero" .. (started % NAMES))
    end
  end

  -- Answers that arrived since the last frame.
  local _, failures = resv.poll()
  for _, f in ipairs(failures or {}) do
    io.stderr:write(f, "\n")
  end

  -- ... update and draw the world here ...

  if started == PLAYERS and in_flight == 0 then break end
  sleep_ms(16) -- about 60 frames a second
end

print(string.format("%d frames: %d names taken, %d refused, %d errors",
                    frame, taken, refused, failed))
assert(taken == NAMES and refused == PLAYERS - NAMES and failed == 0)
store:close()

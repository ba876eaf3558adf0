-- LÖVE 11 settings. RESV_LOVE_HEADLESS=1 runs without a window and
-- graphics (the tests; no display needed).
function love.conf(t)
  t.identity = "resv-names"
  t.version = "11.4"
  t.modules.audio = false
  t.modules.sound = false
  t.modules.joystick = false
  t.modules.physics = false
  t.window.title = "resv: pick a player name"
  if os.getenv("RESV_LOVE_HEADLESS") == "1" then
    t.window = false
    t.modules.window = false
    t.modules.graphics = false
  end
end

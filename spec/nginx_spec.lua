-- A smoke test in a real nginx with lua-nginx-module: the store opened in
-- init_worker_by_lua, calls in content_by_lua waiting without blocking the
-- worker, concurrent requests for one key giving exactly one owner.
-- Skipped when nginx, its Lua module or curl is missing, and under a
-- preloaded sanitizer (nginx would inherit it).
local helpers = require "spec.helpers"

local LUA_MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
local NDK_MODULE = "/usr/lib/nginx/modules/ndk_http_module.so"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

local function has_command(name)
  return sh("command -v " .. name .. " || true"):find("/", 1, true) ~= nil
end

local usable = exists(LUA_MODULE) and exists(NDK_MODULE)
               and has_command("nginx") and has_command("curl")
               and (os.getenv("LD_PRELOAD") or "") == ""

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return (sh("pwd"):gsub("%s+$", "")) .. "/" .. path
end

local CONF = [[
daemon on;
master_process on;
worker_processes @WORKERS@;
error_log @DIR@/error.log warn;
pid @DIR@/nginx.pid;
load_module @NDK@;
load_module @LUA@;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path @DIR@;
  proxy_temp_path @DIR@;
  fastcgi_temp_path @DIR@;
  uwsgi_temp_path @DIR@;
  scgi_temp_path @DIR@;
  lua_package_path "@LUADIR@/?.lua;@LUADIR@/?/init.lua;;";
  lua_package_cpath "@LIBDIR@/?.so;;";
  init_by_lua_block { require "resv" }
  init_worker_by_lua_block {
    local resv = require "resv"
    local uri = "@URI@"
    local store = assert(resv.open { uri = uri ~= "" and uri or nil })
    package.loaded.spec_users = assert(store:type("@CONTEXT@", "user"))
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /ping { return 200; }
    location /reserve {
      content_by_lua_block {
        local users = package.loaded.spec_users
        local r, err = users:reserve({ namespace = "email", key = ngx.var.arg_k },
                                     { id = ngx.var.arg_o }, "req", 60000)
        if not r then ngx.status = 500; ngx.say(err); return end
        ngx.say(r.status, " ", r.owner.id)
      }
    }
  }
}
]]

local describe_or_skip = usable and describe or pending

for _, backend in ipairs(helpers.backends()) do
  describe_or_skip("in nginx on " .. backend.name, function()
    local dir, port

    setup(function()
      dir = sh("mktemp -d"):gsub("%s+$", "")
      local lib = assert(package.searchpath("libresv", package.cpath))
      local context = helpers.fresh_context()
      -- A port from the clock and a process id; another on a
      -- collision (nginx refuses to start).
      local seed = os.time() + tonumber(sh("echo $$"):match("%d+") or 0)
      local out
      for try = 1, 8 do
        port = 20000 + (seed * 7919 + try * 104729) % 30000
        local conf = CONF:gsub("@(%u+)@", {
          DIR = dir, NDK = NDK_MODULE, LUA = LUA_MODULE,
          LUADIR = absolute("lua"), LIBDIR = absolute(lib:match("^(.*)/[^/]+$") or "."),
          URI = backend.options.uri or "", CONTEXT = context,
          PORT = tostring(port),
          -- Each worker has its own memory store: one worker shares one.
          WORKERS = backend.options.uri and "2" or "1",
        })
        local f = assert(io.open(dir .. "/nginx.conf", "w"))
        f:write(conf)
        f:close()
        out = sh("nginx -p " .. dir .. " -c " .. dir .. "/nginx.conf")
        if out == "" or not out:find("in use", 1, true) then break end
      end
      assert(out == "", out)
      -- Wait until it answers.
      for _ = 1, 100 do
        if sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" .. port .. "/ping") == "200" then
          break
        end
        helpers.sleep_ms(20)
      end
    end)

    teardown(function()
      sh("kill -QUIT $(cat " .. dir .. "/nginx.pid)")
      helpers.sleep_ms(200)
      sh("rm -rf " .. dir)
    end)

    local function get(k, o)
      return sh("curl -s 'http://127.0.0.1:" .. port .. "/reserve?k=" .. k .. "&o=" .. o .. "'")
    end

    it("answers a request", function()
      assert.equal("reserved ann\n", get("ann", "ann"))
      assert.equal("conflict ann\n", get("ann", "bob"))
    end)

    it("gives one owner to concurrent requests for one key", function()
      local cmds = {}
      for i = 1, 20 do
        cmds[#cmds + 1] = "curl -s 'http://127.0.0.1:" .. port .. "/reserve?k=same&o=p" .. i .. "' &"
      end
      local out = sh("{ " .. table.concat(cmds, " ") .. " wait; }")
      local reserved, conflicts, owner = 0, 0, nil
      for status, id in out:gmatch("(%a+) (p%d+)") do
        if status == "reserved" then reserved = reserved + 1 end
        if status == "conflict" then conflicts = conflicts + 1 end
        owner = owner or id
        assert.equal(owner, id)
      end
      assert.equal(1, reserved)
      assert.equal(19, conflicts)
      local log = sh("cat " .. dir .. "/error.log")
      assert.is_nil(log:find("[error]", 1, true), log)
    end)
  end)
end

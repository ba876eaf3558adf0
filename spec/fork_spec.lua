-- Spawned coroutines, answers waiting in the inbox and the inbox's
-- descriptor belong to the process that made them: after fork() the child
-- starts with none of them, and the parent's are untouched (docs/design.md section
-- 9; issue 11, finding 2). The calls here go to MongoDB, whose answers
-- come through the inbox (the memory store answers inline).
local resv = require "resv"
local helpers = require "spec.helpers"

local uri = helpers.mongo_uri()

local function with_app(name)
  return uri .. (uri:find("?", 1, true) and "&" or "?") .. "appname=" .. name
end

local function key(k)
  return { namespace = "n", key = k }
end

local OWNER = { id = "o" }

if uri then
  describe("after fork()", function()
    it("an answer waiting in the inbox is the parent's alone", function()
      local store = assert(resv.open { uri = uri })
      local t = assert(store:type(helpers.fresh_context(), "user"))
      local answered = 0
      resv.spawn(function()
        assert.equal("reserved", assert(t:reserve(key("k"), OWNER, "a", 60000)).status)
        answered = answered + 1
      end)
      local fd = assert(resv.fd())
      assert.is_true(helpers.readable(fd, 5000), "the answer never arrived")

      local code = helpers.in_child(function()
        -- The child resumes nothing, knows no coroutine, and its descriptor
        -- is its own: draining here must not eat the parent's wake-up.
        local resumed = resv.poll()
        local own_fd = resv.fd()
        return resumed == 0 and answered == 0 and resv.pending() == 0
               and own_fd ~= fd and not helpers.readable(own_fd, 0)
      end)
      assert.equal(0, code)

      assert.is_true(helpers.readable(fd, 0), "the child ate the parent's wake-up")
      assert.equal(1, (resv.poll()))
      assert.equal(1, answered)
      store:close()
    end)

    it("a call in flight is the parent's alone, and the child's run() returns at once", function()
      local app = "fork" .. math.random(1, 1e9)
      local store = assert(resv.open { uri = with_app(app), timeout_ms = 4000 })
      local t = assert(store:type(helpers.fresh_context(), "user"))
      helpers.fail_point(uri, 1, "{'failCommands': ['findAndModify'], 'blockConnection': True, "
                         .. "'blockTimeMS': 800, 'appName': '" .. app .. "'}")
      local answer
      resv.spawn(function()
        answer = assert(t:reserve(key("slow"), OWNER, "a", 60000))
      end)
      assert.equal(1, resv.pending())

      local code = helpers.in_child(function()
        local C = require "resv.ffi"
        local function clock() return tonumber(C.resv_clock_ms()) end
        local started = clock()
        local ok = resv.run()
        return ok == true and resv.pending() == 0 and answer == nil
               and clock() - started < 500
      end)
      assert.equal(0, code)

      assert.is_true(resv.run())
      assert.equal("reserved", answer.status)
      store:close()
    end)

    it("the child's own calls wait and answer in the child", function()
      local store = assert(resv.open { uri = uri })
      local t = assert(store:type(helpers.fresh_context(), "user"))
      resv.spawn(function() assert(t:get(key("k"))) end)
      local code = helpers.in_child(function()
        local own = assert(resv.open { uri = uri })
        local ot = assert(own:type(helpers.fresh_context(), "user"))
        local status
        resv.spawn(function()
          status = assert(ot:reserve(key("child"), OWNER, "a", 60000)).status
        end)
        local ok = resv.run()
        own:close()
        return ok == true and status == "reserved"
      end)
      assert.equal(0, code)
      assert.is_true(resv.run())
      store:close()
    end)
  end)
end

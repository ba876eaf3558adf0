-- LuaRocks package of resv: the LuaJIT module and the C library it binds.
-- The C core builds with the project's Makefile, which finds mongo-c-driver
-- through pkg-config (Debian: libmongoc-dev libbson-dev pkg-config) and
-- links LMDB (Debian: liblmdb-dev).
rockspec_format = "3.0"
package = "resv"
version = "0.1.0-1"

source = {
  -- The repository's public address goes here once it has one.
  url = "git+https://github.com/resv/resv.git",
  tag = "v0.1.0",
}

description = {
  summary = "Unique-key reservations on MongoDB for LuaJIT and OpenResty",
  detailed = [[
Reserve a value (an e-mail, a slug, a seat) for an owner, confirm it once
the owner's fact is stored, or abandon it; an unconfirmed reservation
expires. The MongoDB round trips run on a C thread pool while the calling
coroutine is parked: in OpenResty the nginx worker never blocks, a game
loop polls once per frame, a plain script blocks. An in-memory store with
the same answers needs no server. Requires LuaJIT (the module uses its FFI).
]],
  license = "MIT",
  labels = { "mongodb", "openresty", "ffi", "luajit" },
}

dependencies = {
  "lua >= 5.1, < 5.2",
}

build = {
  type = "make",
  build_target = "all",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
  },
  install_target = "lua-install",
  install_variables = {
    PREFIX = "$(PREFIX)",
    LUA_SHAREDIR = "$(LUADIR)",
    LUA_LIBDIR = "$(LIBDIR)",
  },
}

test = {
  type = "command",
  command = "make test-lua",
}

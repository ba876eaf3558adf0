-- LuaRocks package of resv: the LuaJIT module and the C library it binds.
--   luarocks --lua-version=5.1 make resv-0.1.0-1.rockspec
-- The C core builds with the project's Makefile, which finds mongo-c-driver
-- through pkg-config (Debian: libmongoc-dev libbson-dev pkg-config) and
-- links LMDB (Debian: liblmdb-dev); external_dependencies makes a missing
-- one a LuaRocks error before the build. The library goes into a folder of
-- the rock's own (clib/), never into the tree's lib/: it is not a Lua
-- module, and resv/libpath.lua tells resv.ffi where it is.
rockspec_format = "3.0"
package = "resv"
version = "0.1.0-1"

-- Built from the git tag v0.1.0 of the repository (each release is the tag
-- v<version>; rockspec revisions -2, -3 build the same tag). `luarocks make`
-- in a checkout builds that work tree instead, whatever it holds.
source = {
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
  license = "MIT",  -- the LICENSE file
  labels = { "mongodb", "openresty", "ffi", "luajit" },
}

-- The module uses LuaJIT's FFI: plain Lua 5.1 cannot load it.
dependencies = {
  "luajit >= 2.0",
}

external_dependencies = {
  MONGOC = { library = "mongoc-1.0" },
  BSON = { library = "bson-1.0" },
  LMDB = { header = "lmdb.h", library = "lmdb" },
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
    LUA_LIBDIR = "$(PREFIX)/clib",
  },
  -- The operator's command (docs/cli.md).
  install = {
    bin = { resv = "bin/resv" },
  },
}

test = {
  type = "command",
  command = "make test-lua",
}

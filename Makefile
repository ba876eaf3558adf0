# resv: unique-key reservations on MongoDB, for LuaJIT.
#
#   make            build $(O)/libresv.so and $(O)/libresv.a
#   make demo       install what is missing, build, run the demo
#   make test       install what is missing, build, run every test
#   make asan/tsan  the C tests under AddressSanitizer+UBSan / ThreadSanitizer
#   make valgrind   the C tests under valgrind's leak checker
#   make install    PREFIX=/usr/local LIBDIR=$(PREFIX)/lib DESTDIR=
#
# O names the build folder, so several builds (and several people) can
# share one work tree: make O=build-asan.

O       ?= build
PREFIX  ?= /usr/local
CC      ?= cc
PYTHON  ?= /usr/bin/python3
LUAJIT  ?= luajit
# The version is the rockspec's (version = "0.1.0-1" is 0.1.0): the
# library's resv_version() (and so resv._VERSION and resv --version), its
# file name and resv.pc take it from here.
ROCKSPEC := $(firstword $(wildcard resv-*-*.rockspec))
VERSION := $(shell sed -n 's/^version *= *"\([^"]*\)-[0-9][0-9]*"/\1/p' $(ROCKSPEC))
ifeq ($(VERSION),)
$(error no version = "X-N" line in a resv-*.rockspec)
endif
SOVERSION := 0

PKGS      := libmongoc-1.0 libbson-1.0
DEPS_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEPS_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wundef \
           -Wcast-align -Wwrite-strings -Wno-unused-parameter
OPT     ?= -O2 -g
SAN     ?=
# The core's folders (CONTRIBUTING.md, "The source tour"): each file includes its neighbours'
# headers by name.
CSRC_DIRS := csrc csrc/base csrc/store csrc/dispatch csrc/rules csrc/doc csrc/memory csrc/file csrc/mongo
CFLAGS_ALL  = $(CSRC_DIRS:%=-I%) -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden $(OPT) $(SAN) \
              $(WARN) $(DEPS_CFLAGS) -DRESV_VERSION='"$(VERSION)"' $(CFLAGS)
LDFLAGS_ALL = $(SAN) $(LDFLAGS)
LIBS_ALL    = $(DEPS_LIBS) -llmdb -lpthread

LIB_SRC  := $(sort $(wildcard csrc/*.c csrc/*/*.c))
LIB_SRC  := $(filter-out csrc/test/%,$(LIB_SRC))
LIB_OBJ  := $(LIB_SRC:csrc/%.c=$(O)/obj/%.o)
TEST_SRC := $(sort $(wildcard csrc/test/*.c))
TEST_OBJ := $(TEST_SRC:csrc/test/%.c=$(O)/obj/test/%.o)
HEADERS  := $(wildcard csrc/*.h csrc/*/*.h)

# ---- Debian packages (make deps, make test-deps) ----------------------
# DEMO_PACKAGES: what `make` and `make demo` need (the compiler, the
# libraries resv links, LuaJIT, nginx with its Lua module, and the demo's
# JSON module and Python). TEST_PACKAGES: what only the tests need. `make
# deps` installs the missing demo packages, `make test-deps` both lists.
DEMO_PACKAGES := gcc make pkg-config libmongoc-dev libbson-dev liblmdb-dev \
                 luajit2 nginx-core libnginx-mod-http-lua lua-dkjson python3
# The C test framework, busted, the emulator's Python libraries, the
# sanitizers' runtimes and valgrind, openssl (the emulator's TLS tests),
# lmdb-utils (mdb_stat, mdb_dump on the file store).
TEST_PACKAGES := check lua-busted python3-mockupdb python3-mongomock python3-pymongo \
                 valgrind clang libclang-rt-14-dev openssl lmdb-utils
# bench/redis_nx.c compares the file store with Redis (through hiredis).
TEST_PACKAGES += redis-server libhiredis-dev
# The hosts the Lua module is tested in (spec/hosts/).
TEST_PACKAGES += tarantool lua-luv neovim lua-cqueues love
# The model checker of model/.
TEST_PACKAGES += spin
# make test-install tries the rockspec with LuaRocks.
TEST_PACKAGES += luarocks
# promtool checks the Prometheus text of resv.metrics and resv stats.
TEST_PACKAGES += prometheus
# What `make deps` installs (bench-deps passes its own list).
DEB_PACKAGES := $(DEMO_PACKAGES)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: lua-files all deps demo test test-layout test-c test-quickstart test-crash test-mongos test-emulator test-spectests test-lua test-nginx test-tarantool lua-cdef lua-install test-install \
        asan tsan valgrind bench bench-deps fuzz test-fuzz stress model test-model \
        install uninstall clean

all: $(O)/libresv.so $(O)/libresv.a

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# The test-only packages come with every target that runs tests. A target
# that builds (check, valgrind, stress, fuzz and model after test-deps,
# bench after bench-deps, demo after deps) installs first, then builds in
# a second make (its -run target): on a fresh machine, and under -j,
# nothing compiles before its headers are there (scripts/check-make-order
# checks it).
.PHONY: test-deps check-run valgrind-run stress-run fuzz-run model-run bench-run demo-run
test-deps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(DEMO_PACKAGES) $(TEST_PACKAGES)"
test asan tsan check valgrind stress fuzz model: test-deps
bench: bench-deps
demo: deps
check valgrind stress fuzz model bench demo:
	@$(MAKE) --no-print-directory $@-run

$(O)/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(CFLAGS_ALL) -c $< -o $@

# resv_version() is the rockspec's version.
$(O)/obj/base/error.o: $(ROCKSPEC)

$(O)/obj/test/%.o: csrc/test/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(CFLAGS_ALL) -Icsrc $(shell pkg-config --cflags check) -c $< -o $@

$(O)/libresv.so: $(LIB_OBJ) Makefile
	$(CC) -shared -Wl,-soname,libresv.so.$(SOVERSION) $(LDFLAGS_ALL) -o $@ $(LIB_OBJ) $(LIBS_ALL)

$(O)/libresv.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(O)/resv_tests: $(TEST_OBJ) $(O)/libresv.a $(O)/resv_freeze
	$(CC) $(LDFLAGS_ALL) -o $@ $(TEST_OBJ) $(O)/libresv.a $(LIBS_ALL) \
	  $(shell pkg-config --libs check)

# A writer frozen inside a commit, for the tests of a host never blocked
# (the nonblocking suite, spec/nonblocking_spec.lua and test-nginx run it).
$(O)/resv_freeze: csrc/test/tools/freeze_committer.c $(O)/libresv.a
	$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -o $@ $< $(O)/libresv.a $(LIBS_ALL)

# ---- tests ------------------------------------------------------------

# test, asan and tsan install the test tools first (test-deps, above).
test:
	$(MAKE) test-layout test-c test-crash test-mongos test-emulator test-spectests test-lua test-nginx test-tarantool test-hosts test-install test-cli test-docs test-fuzz asan test-model

# The C suite runs against MONGODB_URI when set, else a fresh emulator;
# then the C quick start.
test-c: $(O)/resv_tests $(O)/examples/quickstart
	scripts/with-mongo $(O)/resv_tests
	@$(MAKE) --no-print-directory test-quickstart

# The C quick start on memory and on MongoDB: it exits 0 (every answer as
# expected) and prints the answers of its calls of several keys.
QUICKSTART_LINES := 'bob@example.com and bob: reserved' 'bob@example.com and bob: confirmed'
test-quickstart: $(O)/examples/quickstart
	$(O)/examples/quickstart >$(O)/quickstart.out
	scripts/with-mongo sh -c '$(O)/examples/quickstart "$$RESV_TEST_URI"' >$(O)/quickstart-mongodb.out
	@for out in $(O)/quickstart.out $(O)/quickstart-mongodb.out; do \
	  for line in $(QUICKSTART_LINES); do grep -qxF "$$line" $$out || \
	    { echo "$$out has no line '$$line':"; cat $$out; exit 1; }; done; done

# The MongoDB suites again with the emulator answering as a mongos (or
# MONGODB_URI, when it names one): sharding on first use, and every rule
# and the differential test routed by the shard key.
MONGOS_SUITES := rules_mongo,mongo_diff,race,mongo_store,mongo_options,mongo_all,mongo_all_faults,mongo_inline
test-mongos: $(O)/resv_tests
	RESV_SUITES=$(MONGOS_SUITES) scripts/with-mongo --mongos $(O)/resv_tests

# The file store after a crash of the OS (csrc/test/crash/): the
# writes and barriers of a workload recorded, the states a crash may leave
# built from them and opened after a fake reboot, CRASH_STATES of each
# sync mode: "disk" holds every answer, "process" is refused or does.
CRASH_STATES ?= 400
test-crash: $(O)/test/crash/crash_state
	$(O)/test/crash/crash_state disk $(CRASH_STATES)
	$(O)/test/crash/crash_state process $(CRASH_STATES)

CRASH_SRC := csrc/test/crash/crash_state.c csrc/test/crash/crash_record.c
$(O)/test/crash/crash_state: $(CRASH_SRC) csrc/test/crash/crash.h csrc/resv.h $(O)/libresv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icsrc -o $@ $(CRASH_SRC) $(O)/libresv.a $(LIBS_ALL) -ldl

$(O)/examples/%: examples/c/%.c $(O)/libresv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icsrc -o $@ $< $(O)/libresv.a $(LIBS_ALL)

test-emulator:
	$(PYTHON) emulator/tests/run.py

# MongoDB's specification tests (CRUD, retryable writes, read and write
# concern: pinned copies under Apache-2.0, emulator/spectests/README.md)
# against the emulator, plain and on a three-member emulated replica set;
# each skip is printed with its reason.
test-spectests:
	$(PYTHON) emulator/spectests/run.py
	$(PYTHON) emulator/spectests/run.py --replset

asan:
	$(MAKE) O=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" OPT="-O1 -g" test-c

# die_after_fork=0: the fork tests' children open file stores, and one with
# sync = "process" starts its checkpoint thread.
tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/csrc/test/tsan.supp die_after_fork=0 $$TSAN_OPTIONS" \
	  $(MAKE) O=build-tsan SAN="-fsanitize=thread" OPT="-O1 -g" test-c

# The fork tests' children are silent: a store inherited over fork() is
# left to the parent that owns its threads and connections, by design.
# --fair-sched=yes: valgrind runs one thread at a time, and its default lock
# lets threads that never block starve the rest (its manual, "--fair-sched");
# the stress suite's eight workers kept its main thread from stopping them.
valgrind-run: $(O)/resv_tests
	CK_FORK=no RESV_TEST_SLOW=1 scripts/with-mongo valgrind --error-exitcode=1 \
	  --fair-sched=yes --child-silent-after-fork=yes \
	  --leak-check=full --show-leak-kinds=definite,indirect,possible \
	  --errors-for-leak-kinds=definite,indirect,possible $(O)/resv_tests

# ---- reliability: fuzzing (fuzz/, libFuzzer under clang) and stress ---

FUZZ_O       := build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := validate decode record
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined $(WARN) -Wno-format-nonliteral \
                $(DEPS_CFLAGS) $(CSRC_DIRS:%=-I%) -DRESV_VERSION='"$(VERSION)"'
FUZZ_SRC_validate := csrc/base/validate.c csrc/base/error.c
FUZZ_SRC_decode   := csrc/base/validate.c csrc/base/error.c csrc/doc/doc_decode.c csrc/base/answer.c
FUZZ_SRC_record   := csrc/base/validate.c csrc/base/error.c csrc/file/file_record.c

$(FUZZ_O)/fuzz_%: fuzz/fuzz_%.c $(HEADERS) $(FUZZ_SRC_decode) $(FUZZ_SRC_record)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_SRC_$*) $(LIBS_ALL)

# Each target for FUZZ_SECONDS, from fuzz/corpus/<target>; what it finds
# goes to $(FUZZ_O)/corpus/<target>, a crash to $(FUZZ_O)/crash-<target>-*
# (copy it into fuzz/regress/<target>/ once fixed).
fuzz-run: $(FUZZ_TARGETS:%=$(FUZZ_O)/fuzz_%)
	for t in $(FUZZ_TARGETS); do mkdir -p $(FUZZ_O)/corpus/$$t && \
	  $(FUZZ_O)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_O)/crash-$$t- $(FUZZ_O)/corpus/$$t fuzz/corpus/$$t \
	  || exit 1; done

# In make test: the seeds and regressions once, then 5 s of each target.
test-fuzz: $(FUZZ_TARGETS:%=$(FUZZ_O)/fuzz_%)
	@for t in $(FUZZ_TARGETS); do rm -rf $(FUZZ_O)/quick/$$t && mkdir -p $(FUZZ_O)/quick/$$t && \
	  $(FUZZ_O)/fuzz_$$t -runs=0 fuzz/corpus/$$t fuzz/regress/$$t >$(FUZZ_O)/$$t.log 2>&1 && \
	  $(FUZZ_O)/fuzz_$$t -max_total_time=5 -artifact_prefix=$(FUZZ_O)/crash-$$t- \
	    $(FUZZ_O)/quick/$$t fuzz/corpus/$$t >>$(FUZZ_O)/$$t.log 2>&1 && \
	  echo "fuzz_$$t: $$(grep -o 'Done [0-9]* runs' $(FUZZ_O)/$$t.log | tail -1), no crash" \
	  || { tail -40 $(FUZZ_O)/$$t.log; exit 1; }; done

# The stress runs for STRESS_MS on each store (make test runs them for
# 1.5 s): the C suite (threads) and the Lua spec (coroutines).
STRESS_MS ?= 60000
stress-run: $(O)/resv_tests $(O)/libresv.so
	RESV_STRESS_MS=$(STRESS_MS) CK_RUN_SUITE=stress scripts/with-mongo $(O)/resv_tests
	RESV_STRESS_MS=$(STRESS_MS) LUA_CPATH="$(O)/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;" \
	  scripts/with-mongo $(LUAJIT) /usr/bin/busted spec/stress_spec.lua

# ---- the protocol, model-checked (model/, SPIN) ---------------------

# docs/design.md section 5 in Promela, checked exhaustively, every planted mutant
# caught, then MODEL_TRACES random traces of the model replayed against
# the memory store (model/README.md). make test runs a small size.
MODEL_TRACES ?= 200
model-run: $(O)/model/replay
	MODEL_O=$(O)/model model/check.sh
	model/replay.sh $(O)/model/replay $(MODEL_TRACES)

test-model: $(O)/model/replay
	MODEL_O=$(O)/model model/check.sh quick
	model/replay.sh $(O)/model/replay 30

$(O)/model/replay: model/replay.c csrc/resv.h $(O)/libresv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icsrc -o $@ $< $(O)/libresv.a $(LIBS_ALL)

# ---- the Lua module (lua/, spec/) ------------------------------------

# The busted specs under LuaJIT (settings in .busted), against the emulator
# or MONGODB_URI as well as the memory store.
test-lua: $(O)/libresv.so $(O)/resv_freeze
	LUA_CPATH="$(O)/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;" \
	  scripts/with-mongo $(LUAJIT) /usr/bin/busted

# The folders of csrc/ depend on each other one way (scripts/check-layout
# holds the table, CONTRIBUTING.md draws it): the includes the compiler
# reads (-M) and the calls between the objects (nm), against the table.
test-layout: $(LIB_OBJ)
	@$(PYTHON) scripts/check-layout '$(CC)' '$(CFLAGS_ALL)' $(O)
	@$(PYTHON) scripts/check-make-order

# ---- make check: the inner loop (no server, no emulator) ----------------
# The build, the C suites that need no MongoDB, the Lua specs on the
# embedded stores (busted without RESV_TEST_URI skips the MongoDB specs),
# the layout check and the documentation's examples that need no server.
# A suite that needs no emulator belongs in CHECK_SUITES.
CHECK_SUITES := validate,rules_memory,rules_all,rules_model,pool,job,memory,mongo_decode,mongo_build,mongo_inplace,mongo_log,rules_file,file_store,file_diff,file_records,file_integrity
.PHONY: check test-docs test-docs-offline
check-run: all $(O)/resv_tests
	RESV_SUITES=$(CHECK_SUITES) env -u RESV_TEST_URI $(O)/resv_tests
	env -u RESV_TEST_URI LUA_CPATH="$(O)/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;" \
	  $(LUAJIT) /usr/bin/busted >$(O)/check-busted.log 2>&1 \
	  && tail -1 $(O)/check-busted.log || { cat $(O)/check-busted.log; exit 1; }
	@$(MAKE) --no-print-directory test-layout test-docs-offline

# Every code block of README.md and docs/ marked runnable (scripts/test-docs):
# Lua, shell and C from a scratch folder outside the work tree, the nginx.conf
# through nginx -t and a request; test-docs also runs the blocks that need a
# MongoDB (against the emulator or MONGODB_URI).
DOCS_ENV = O=$(O) LUAJIT=$(LUAJIT) CC="$(CC)" C_LIBS="$(LDFLAGS_ALL) $(LIBS_ALL)"
test-docs: all
	$(DOCS_ENV) scripts/with-mongo $(PYTHON) scripts/test-docs
test-docs-offline: all
	$(DOCS_ENV) $(PYTHON) scripts/test-docs --offline
# ---- end of make check --------------------------------------------------

# resv in the real Tarantool: fibers yield and resume as themselves, and
# the event loop keeps ticking (against the emulator or MONGODB_URI).
# Then `tarantoolctl rocks make` into a scratch tree, and a script outside
# the work tree that finds resv there by require alone.
test-tarantool: $(O)/libresv.so
	RESV_CPATH="$(O)/?.so;;" scripts/with-mongo tarantool spec/hosts/tarantool_test.lua
	@tree=$$(mktemp -d) && app=$$(mktemp -d) && \
	  tarantoolctl rocks --tree "$$tree" make resv-$(VERSION)-1.rockspec >"$$tree/make.log" 2>&1 && \
	  printf '%s\n' 'local s = assert(require("resv").open {})' \
	    'local t = assert(s:type("tnt", "rock"))' \
	    'local r = assert(t:reserve({ namespace = "n", key = "k" }, { id = "o" }, "a", 1000))' \
	    'os.exit(r.status == "reserved" and 0 or 1)' >"$$app/app.lua" && \
	  (cd "$$app" && LUA_PATH="$$tree/share/tarantool/?.lua;$$tree/share/tarantool/?/init.lua;;" \
	    tarantool app.lua) && rm -rf "$$tree" "$$app" && \
	  echo "test-tarantool: tarantoolctl rocks make installs resv where require finds it" || \
	  { echo "test-tarantool: the rock did not install or load"; cat "$$tree/make.log"; exit 1; }

# resv's host helpers in the real hosts (spec/hosts/*_test.lua and the
# examples), against one emulator or MONGODB_URI: resv.luv in Debian's
# lua-luv under LuaJIT and in headless Neovim, resv.cqueues in Debian's
# lua-cqueues, and examples/love in LÖVE 11.4 (headless: no window or
# graphics) as a game folder, a .love and a fused game. Standard input is
# /dev/null: libuv aborts when its descriptors land on a closed fd 0-2.
.PHONY: test-hosts
HOSTS_ENV = LUA_CPATH="$(O)/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;" RESV_CPATH="$(O)/?.so" RESV_BUILD=$(O)
test-hosts: $(O)/libresv.so
	$(HOSTS_ENV) scripts/with-mongo sh -c '\
	  $(LUAJIT) spec/hosts/luv_test.lua && \
	  $(LUAJIT) spec/hosts/cqueues_test.lua && \
	  $(LUAJIT) spec/hosts/love_test.lua && \
	  nvim --headless -u NONE -c "luafile spec/hosts/nvim_test.lua" && \
	  $(LUAJIT) examples/hosts/luv.lua "$$RESV_TEST_URI" && \
	  $(LUAJIT) examples/hosts/cqueues.lua "$$RESV_TEST_URI" && \
	  $(LUAJIT) examples/hosts/cqueues.lua && \
	  nvim --headless -u NONE -c "luafile examples/hosts/nvim.lua"' </dev/null

# The OpenResty gateway in a real nginx, against the emulator or MONGODB_URI;
# resv.ngx's helpers (every worker's counters at /metrics, the 503) there;
# then a few of its tests and the demo from a clone in a 0700 directory.
test-nginx: $(O)/libresv.so $(O)/resv_freeze
	RESV_BUILD=$(O) scripts/with-mongo $(PYTHON) examples/openresty/test/test_gateway.py
	RESV_BUILD=$(O) $(PYTHON) examples/openresty/test/test_metrics.py
	RESV_BUILD=$(O) scripts/with-mongo $(PYTHON) examples/openresty/test/test_private_clone.py

# The resv command (bin/resv) on a file store and on the emulator or
# MONGODB_URI: every subcommand, --help, bad arguments (exit 2).
.PHONY: test-cli
test-cli: $(O)/libresv.so
	RESV_BUILD=$(O) scripts/with-mongo $(PYTHON) spec/cli/test_cli.py

# Copies the header's RESV_CDEF block into lua/resv/cdef.lua.
lua-cdef:
	$(LUAJIT) spec/gen_cdef.lua

# LuaRocks' install step (resv-0.1.0-1.rockspec): the Lua files into
# LUA_SHAREDIR, libresv.so into LUA_LIBDIR, and resv/libpath.lua naming
# where it went (resv.ffi loads it from there). LuaRocks passes a folder of
# the rock's own for LUA_LIBDIR, so its manifest lists no "libresv" module.
LUA_SHAREDIR ?= $(PREFIX)/share/lua/5.1
LUA_LIBDIR   ?= $(LIBDIR)/lua/5.1
lua-install: lua-files $(O)/libresv.so
	install -d $(DESTDIR)$(LUA_LIBDIR)
	install -m 755 $(O)/libresv.so $(DESTDIR)$(LUA_LIBDIR)/libresv.so
	printf 'return "%s"\n' '$(LUA_LIBDIR)/libresv.so' > $(DESTDIR)$(LUA_SHAREDIR)/resv/libpath.lua

lua-files:
	install -d $(DESTDIR)$(LUA_SHAREDIR)/resv $(DESTDIR)$(LUA_SHAREDIR)/resv/cli
	install -m 644 lua/resv.lua $(DESTDIR)$(LUA_SHAREDIR)/resv.lua
	install -m 644 lua/resv/*.lua $(DESTDIR)$(LUA_SHAREDIR)/resv/
	install -m 644 lua/resv/cli/*.lua $(DESTDIR)$(LUA_SHAREDIR)/resv/cli/

# ---- benchmarks (bench/; figures, never pass/fail on a time) --------

BENCH_SRC  := $(filter-out bench/apm.c,$(wildcard bench/*.c))
BENCH_BIN  := $(BENCH_SRC:bench/%.c=$(O)/bench/%)
BENCH_WRAP := -Wl,--wrap=mongoc_client_pool_new_with_error \
              -Wl,--wrap=mongoc_client_new_from_uri_with_error

$(O)/bench/%: bench/%.c bench/apm.c $(wildcard bench/*.h) $(HEADERS) $(O)/libresv.a
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	@$(CC) $(CFLAGS_ALL) -Icsrc -o $@ $< bench/apm.c $(O)/libresv.a \
	  $(LDFLAGS_ALL) $(LIBS_ALL) $(BENCH_WRAP)

$(O)/bench/redis_nx: LIBS_ALL += -lhiredis
$(O)/bench/rivals: LIBS_ALL += -lhiredis -lsqlite3

# Runs every benchmark (a few minutes) and keeps the figures in
# $(O)/bench/results.txt; bench/README.md explains them.
# What only the benchmarks need: wrk drives the gateway, gnuplot draws.
BENCH_PACKAGES := wrk gnuplot-nox curl libsqlite3-dev
bench-deps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(DEMO_PACKAGES) $(TEST_PACKAGES) $(BENCH_PACKAGES)"

bench-run: $(BENCH_BIN) $(O)/libresv.so
	O=$(O) LUAJIT=$(LUAJIT) PYTHON=$(PYTHON) bench/run.sh

# ---- demo -------------------------------------------------------------

# The OpenResty sign-up gateway (examples/openresty) in a private nginx on
# loopback, and a race of sign-ups against it: on the file store with four
# workers (a fresh directory under the build folder),
# or on MongoDB with `make demo MONGODB_URI=mongodb://...`.
demo-run: all
	RESV_BUILD=$(O) $(PYTHON) examples/openresty/demo.py --uri '$(MONGODB_URI)'

# ---- install ----------------------------------------------------------

# The header, libresv.so.$(VERSION) with its soname link libresv.so.0 and
# the link libresv.so, libresv.a, resv.pc, the Lua files, and the Lua C
# module: a link to the library in LUA_LIBDIR ($(LIBDIR)/lua/5.1, where
# Debian's LuaJIT looks for /usr/local and for the multiarch
# LIBDIR=/usr/lib/x86_64-linux-gnu).
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
PCDIR      ?= $(LIBDIR)/pkgconfig
SONAME     := libresv.so.$(SOVERSION)
install: all lua-files
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(LUA_LIBDIR) $(DESTDIR)$(BINDIR)
	install -m 755 bin/resv $(DESTDIR)$(BINDIR)/resv
	install -m 644 csrc/resv.h $(DESTDIR)$(INCLUDEDIR)/resv.h
	install -m 755 $(O)/libresv.so $(DESTDIR)$(LIBDIR)/libresv.so.$(VERSION)
	ln -sf libresv.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libresv.so
	install -m 644 $(O)/libresv.a $(DESTDIR)$(LIBDIR)/libresv.a
	ln -sf $$(realpath -m --relative-to=$(LUA_LIBDIR) $(LIBDIR))/$(SONAME) \
	  $(DESTDIR)$(LUA_LIBDIR)/libresv.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	  -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' resv.pc.in \
	  > $(DESTDIR)$(PCDIR)/resv.pc

# Everything install and lua-install write (same variables as they had).
uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/resv.h $(DESTDIR)$(LIBDIR)/libresv.so \
	  $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libresv.so.$(VERSION) \
	  $(DESTDIR)$(LIBDIR)/libresv.a $(DESTDIR)$(PCDIR)/resv.pc \
	  $(DESTDIR)$(LUA_LIBDIR)/libresv.so $(DESTDIR)$(LUA_SHAREDIR)/resv.lua \
	  $(DESTDIR)$(BINDIR)/resv
	rm -rf $(DESTDIR)$(LUA_SHAREDIR)/resv
	@# The folders install made: the Lua and pkg-config ones when empty; in
	@# a DESTDIR (a staging tree, all of it the install's) every empty one
	@# up to DESTDIR. The system's own folders (/usr/local/lib) stay.
	@rmdir --ignore-fail-on-non-empty $(DESTDIR)$(LUA_SHAREDIR) $(DESTDIR)$(LUA_LIBDIR) \
	  $(DESTDIR)$(PCDIR) 2>/dev/null; \
	rmdir --ignore-fail-on-non-empty $(filter %/lua/,$(dir $(DESTDIR)$(LUA_SHAREDIR)) \
	  $(dir $(DESTDIR)$(LUA_LIBDIR))) 2>/dev/null; true
	@if [ -n "$(DESTDIR)" ] && [ -d "$(DESTDIR)" ]; then \
	  cd "$(DESTDIR)" && for d in $(INCLUDEDIR) $(LIBDIR) $(PCDIR) $(BINDIR) $(LUA_SHAREDIR) $(LUA_LIBDIR); do \
	    d=$${d#/}; while [ "$$d" != . ]; do \
	      if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || break; fi; d=$$(dirname "$$d"); done; \
	  done; true; \
	fi

# A packager's round: make install into a fresh DESTDIR (multiarch LIBDIR),
# the C quick start built with pkg-config from there, require "resv" from
# the installed files only, lua-install likewise, then make uninstall
# leaves no file.
test-install: all
	scripts/test-install

clean:
	rm -rf build build-*

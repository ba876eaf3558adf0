#!/usr/bin/env bash
# bench/run.sh: runs every benchmark and keeps the figures.
#   O=build bench/run.sh        (make bench does this)
# Output goes to the terminal and to $O/bench/results.txt; plots (PNG) and
# their data go to $O/bench/. Each program prints its own ratios against
# a baseline measured in the same run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
O=${O:-build}
LUAJIT=${LUAJIT:-luajit}
out=$O/bench
mkdir -p "$out"
results=$out/results.txt
: >"$results"

say() { echo "$@" | tee -a "$results"; }
run() { "$@" 2>&1 | tee -a "$results"; }

say "resv benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r)"

# 1. Round trips per operation, on a replica-set primary and on a mongos.
run scripts/with-mongo "$out/roundtrips"
run scripts/with-mongo --mongos "$out/roundtrips" --mongos

# 2. Client CPU per reserve: the CPU clock, then callgrind's instruction
#    counts of the same three phases (one dump per phase).
run scripts/with-mongo "$out/cpu" 300
if command -v valgrind >/dev/null; then
  rm -f "$out"/callgrind.cpu.*
  scripts/with-mongo valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.cpu" \
    "$out/cpu" 200 >/dev/null 2>&1
  run bench/callgrind_phases.sh "$out/callgrind.cpu" 200
fi

# 3. The Lua API over the C API: memory store (wall ns per call), then
#    MongoDB (client CPU per call), three times, alternating C and Lua.
export LUA_CPATH="$O/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;"
fig() { awk -v k="$1" '$1 == "figure" && $2 == k { print $3 }'; }
c=$("$out/capi" memory 100000)
echo "$c" | tee -a "$results"
run "$LUAJIT" bench/lua_overhead.lua memory 100000 \
  "$(fig c_reserve_new_ns <<<"$c")" "$(fig c_reserve_again_ns <<<"$c")" \
  "$(fig c_conflict_ns <<<"$c")" "$(fig c_submit_new_ns <<<"$c")"
for i in 1 2 3; do
  c=$(scripts/with-mongo "$out/capi" mongo 2000)
  echo "$c" | tee -a "$results"
  run scripts/with-mongo "$LUAJIT" bench/lua_overhead.lua mongo 2000 "$(fig c_mongo_cpu_ns <<<"$c")" \
    "$(fig c_mongo_caller_cpu_ns <<<"$c")"
done
# 3d. The same two under callgrind: instructions and L1 misses per call.
if command -v valgrind >/dev/null; then
  run env O="$O" LUAJIT="$LUAJIT" scripts/with-mongo bench/callgrind_lua.sh 800
fi

# 3e. The FFI crossings of one call, per way of waiting (counted, not timed).
run "$LUAJIT" bench/lua_crossings.lua 200

# 4, first: the bytes of Lua heap an answer takes (kept, dropped, into a table).
run "$LUAJIT" bench/lua_answers.lua 100000

# 4. The memory store in nginx against ngx.shared.DICT:add.
run bench/nginx_embedded.sh 100000 15

# 5. Overlap under a fixed write latency, T = 1..16; plot.
run env BENCH_OUT="$out" scripts/with-mongo "$out/overlap" 50 20 1 2 4 8 16

# 6. The sign-up gateway under wrk: 1, 2 and 4 workers, against a no-store
# location and ngx.shared.DICT:add; memory, file and MongoDB; plot.
run env BENCH_OUT="$out" O="$O" scripts/with-mongo /usr/bin/python3 bench/gateway.py 4 16

# 7. Issue 11's costs that grew without bound (decode, types, holds, close).
run scripts/with-mongo "$out/costs"

# 8. The file store: inline calls against the memory store, bytes per
#    reservation, sync = disk's group commit against one fsync per call.
run "$out/filestore" 100000 2
#    sync = disk (the default) against one page's fdatasync, and 32
#    writers against one.
run "$out/durability" 0.3 5
#    What one writer's commit would cost with a redo log in front of
#    LMDB (a design not built), against today's.
run "$out/redo_floor" 1 5
#    and against Redis, one request at a time (SET NX PX through hiredis):
#    process against appendfsync everysec, disk against always.
run "$out/redis_nx" 20000 5
#    sync = disk, 32 writers, against SQLite (WAL, synchronous=FULL) and
#    Redis (appendfsync always) with 32 writers each.
run "$out/rivals" 1 5 32
#    Its records: bytes per reservation in order and scattered, the cost
#    of a get's neighbour and link checks, commits after a big sweep.
run "$out/records" 100000
#    Single-record reserves after a sweep deleted 10,000 and 100,000
#    expired reservations, against the same store's just before.
run "$out/bigdelete" 5 2000 20000 both
#    The same with LMDB alone: its share, the delete's batch, a compacted copy.
run "$out/lmdb_freelist" 5 2000
#    Opening a store of a million reservations: the walk of its pages
#    against LMDB's own open and a pread of every page.
run "$out/open" 1000000 5

# 9. The counters of resv_store_stats on the memory store's hot path.
run "$out/stats_cost" 200

# 10. The memory store under a churn of distinct keys: entries, bytes, RSS.
run "$out/churn" 2000000 1000 1000
# 10b. The same churn in one nginx worker, paced in wall time, against
#      ngx.shared.DICT:add: RSS and what each holds (about 45 s); plot.
run env BENCH_OUT="$out" O="$O" bench/nginx_churn.sh 4000000 20

if command -v gnuplot >/dev/null; then
  gnuplot -e "dir='$out'" bench/plots.gp && say "plots: $out/overlap.png $out/gateway.png $out/churn.png"
fi

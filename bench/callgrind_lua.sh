#!/usr/bin/env bash
# bench/callgrind_lua.sh [CALLS]: where the Lua API's extra CPU on MongoDB
# goes (bench/README.md, section 3). Runs `capi mongo` and `lua_overhead.lua
# mongo` under callgrind (--cache-sim=yes --separate-threads=yes) for CALLS
# and for 2 x CALLS calls, and prints, per call (the difference of the two
# runs over CALLS, so start-up cancels out): the calling thread's
# instructions and L1 misses, and all threads' instructions. Needs
# RESV_TEST_URI (run it under scripts/with-mongo) and the build (make bench).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build} LUAJIT=${LUAJIT:-luajit}
calls=${1:-800}
out=$(mktemp -d /tmp/resv-callgrind-lua.XXXXXX)
trap 'rm -rf "$out"' EXIT
export LUA_CPATH="$here/$O/?.so;;" LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;;"
run() { # name, calls, command...
  local name=$1 n=$2; shift 2
  valgrind --tool=callgrind --cache-sim=yes --separate-threads=yes \
    --callgrind-out-file="$out/$name.$n" "$@" >/dev/null 2>&1
}
for n in "$calls" $((2 * calls)); do
  run c "$n" "$here/$O/bench/capi" mongo "$n"
  run lua "$n" "$LUAJIT" "$here/bench/lua_overhead.lua" mongo "$n" 1 1
done
# The totals line of a thread's file: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
totals() { sed -n 's/^\(summary\|totals\): //p' "$1" | head -1; }
echo "== 3d. the Lua API on MongoDB under callgrind, per call ($calls and $((2 * calls)) calls)"
printf '  %-44s %10s %10s\n' "" "C" "Lua"
for name in c lua; do
  small=$(totals "$out/$name.$calls-01") big=$(totals "$out/$name.$((2 * calls))-01")
  all_small=0 all_big=0
  for f in "$out/$name.$calls"-*; do all_small=$((all_small + $(totals "$f" | cut -d' ' -f1))); done
  for f in "$out/$name.$((2 * calls))"-*; do all_big=$((all_big + $(totals "$f" | cut -d' ' -f1))); done
  echo "$name $small | $big | $all_small $all_big"
done | awk -v calls="$calls" -F' [|] ' '
  { split($1, a, " "); split($2, b, " "); split($3, t, " "); name = a[1]
    ir[name] = (b[1] - a[2]) / calls
    i1[name] = (b[4] - a[5]) / calls
    d1[name] = (b[5] + b[6] - a[6] - a[7]) / calls
    all[name] = (t[2] - t[1]) / calls }
  END {
    printf "  %-44s %10.0f %10.0f\n", "instructions, the calling thread", ir["c"], ir["lua"]
    printf "  %-44s %10.0f %10.0f\n", "instructions, all threads", all["c"], all["lua"]
    printf "  %-44s %10.0f %10.0f\n", "L1 instruction misses, the calling thread", i1["c"], i1["lua"]
    printf "  %-44s %10.0f %10.0f\n", "L1 data misses, the calling thread", d1["c"], d1["lua"]
  }'

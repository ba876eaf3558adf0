#!/usr/bin/env bash
# bench/lua_ab.sh A_LUA B_LUA [ROUNDS] [CALLS] [IN_FLIGHT]: two trees of the Lua
# binding (each a folder holding resv.lua and resv/, e.g. lua/ and an older
# lua/ from `git archive`) on the same C library (build/), on MongoDB with
# IN_FLIGHT (16) spawned coroutines (bench/lua_overhead.lua mongo), in ROUNDS rounds
# that alternate which goes first. Each round counts, for each tree, the
# calling thread's instructions per call under callgrind (the difference
# of a CALLS and a 2 x CALLS run over CALLS, as bench/callgrind_lua.sh)
# and the calling thread's CPU per call in a plain run of 4 x CALLS calls;
# then prints min/median/max of each and the ratio B/A of the medians.
# Needs RESV_TEST_URI (run it under scripts/with-mongo) and build/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build} LUAJIT=${LUAJIT:-luajit}
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) rounds=${3:-6} calls=${4:-800} in_flight=${5:-16}
out=$(mktemp -d /tmp/resv-lua-ab.XXXXXX)
trap 'rm -rf "$out"' EXIT
export LUA_CPATH="$here/$O/?.so;;"
lua_run() { # tree, calls, command prefix...
  local tree=$1 n=$2; shift 2
  LUA_PATH="$tree/?.lua;$tree/?/init.lua;;" "$@" "$LUAJIT" "$here/bench/lua_overhead.lua" mongo "$n" 1 1 "$in_flight"
}
# The calling thread's instructions (the first thread's file) of a run.
ir() { # tree, calls
  lua_run "$1" "$2" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$out/cg.$2" >/dev/null 2>&1
  sed -n 's/^\(summary\|totals\): //p' "$out/cg.$2-01" | head -1 | cut -d' ' -f1
}
measure() { # name, tree
  local small big cpu
  small=$(ir "$2" "$calls") big=$(ir "$2" $((2 * calls)))
  cpu=$(lua_run "$2" $((4 * calls)) | sed -n 's/^ *the calling thread.s CPU alone *\([0-9.]*\).*/\1/p')
  echo "$1 $(( (big - small) / calls )) $cpu" | tee -a "$out/rows"
}
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then measure A "$a"; measure B "$b"; else measure B "$b"; measure A "$a"; fi
done
echo "== the calling thread per call, $in_flight coroutines, $rounds rounds (A: $a, B: $b)"
awk '
  function stats(name, col,   i, n, v, k, j, t, med) {
    n = 0
    for (i = 1; i <= nr; i++) if (who[i] == name) v[++n] = val[i, col]
    for (j = 2; j <= n; j++) { t = v[j]; for (k = j - 1; k >= 1 && v[k] > t; k--) v[k + 1] = v[k]; v[k + 1] = t }
    med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    printf "  %s %-28s min %9.0f  median %9.0f  max %9.0f\n", name, label[col], v[1], med, v[n]
    return med
  }
  { nr++; who[nr] = $1; val[nr, 2] = $2; val[nr, 3] = $3 }
  END {
    label[2] = "instructions (callgrind)"; label[3] = "CPU ns (thread clock)"
    for (c = 2; c <= 3; c++) { ma = stats("A", c); mb = stats("B", c)
      printf "  B/A of the medians: %.2f\n", mb / ma }
  }' "$out/rows"

#!/usr/bin/env bash
# bench/callgrind_dumps.sh CALLS PROGRAM [ARGS...]: runs a benchmark that
# switches callgrind's counts on around its phases and dumps each phase
# (CALLGRIND_DUMP_STATS_AT: bench/newkey.c, bench/several.c) and prints
# each phase's user-space instructions divided by CALLS.
set -euo pipefail
calls=$1
shift
out=$(mktemp /tmp/resv-callgrind.XXXXXX)
trap 'rm -f "$out" "$out".*' EXIT
valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
  "$@" >/dev/null 2>&1
for f in "$out".*; do
  phase=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f")
  [ -n "$phase" ] && awk -v p="$phase" -v t="$total" -v n="$calls" \
    'BEGIN { printf "  %-12s %8.0f instructions a call\n", p, t / n }'
done

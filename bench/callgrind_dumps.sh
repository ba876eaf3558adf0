#!/usr/bin/env bash
# bench/callgrind_dumps.sh PROGRAM [ARGS...]: runs a benchmark that
# switches callgrind's counts on around its phases and dumps each one
# with its count of calls (bench.h's bench_callgrind_dump: bench/newkey.c,
# bench/several.c), and prints each phase's user-space instructions a call.
set -euo pipefail
out=$(mktemp /tmp/resv-callgrind.XXXXXX)
trap 'rm -f "$out" "$out".*' EXIT
valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
  "$@" >/dev/null 2>&1
for f in "$out".*; do
  phase=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f")
  [ -n "$phase" ] && echo "$phase $total" | awk \
    '{ printf "  %-12s %8.0f instructions a call\n", $1, $3 / $2 }'
done

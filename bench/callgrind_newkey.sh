#!/usr/bin/env bash
# bench/callgrind_newkey.sh [KEYS] [s][t]: user-space instructions a
# call of the file store (sync = process) under callgrind: a reserve of a
# new key and a reserve that answers conflict, through resv_call (with t:
# resv_try_call, the call of a host that must not block)
# (bench/newkey.c; make build/bench/newkey first, O= for another build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build}
keys=${1:-20000}
shift || true
out=$(mktemp /tmp/resv-callgrind.XXXXXX)
trap 'rm -f "$out" "$out".*' EXIT
valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" \
  "$here/$O/bench/newkey" "$keys" "$@" >/dev/null 2>&1
for f in "$out".*; do
  phase=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f")
  [ -n "$phase" ] && awk -v p="$phase" -v t="$total" -v n="$keys" \
    'BEGIN { printf "  %-8s %8.0f instructions a call\n", p, t / n }'
done

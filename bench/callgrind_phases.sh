#!/usr/bin/env bash
# bench/callgrind_phases.sh PREFIX CALLS: instructions per call of each
# phase dumped by bench/cpu.c under callgrind (PREFIX.N files, one per
# CALLGRIND_DUMP_STATS_AT), and each phase's ratio to "bare".
set -euo pipefail
prefix=$1 calls=$2
for f in "$prefix".*; do
  phase=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  total=$(sed -n 's/^totals: //p' "$f")
  [ -n "$phase" ] && [ "$phase" != before ] && echo "$phase $total"
done | awk -v calls="$calls" '
  { name[NR] = $1; ir[NR] = $2 / calls; if ($1 == "bare") base = ir[NR] }
  END {
    print "== 2b. client instructions per reserve (callgrind, user space, all threads)"
    printf "  %-10s %12s %7s\n", "phase", "instr/call", "ratio"
    for (i = 1; i <= NR; i++) printf "  %-10s %12.0f %7.2f\n", name[i], ir[i], ir[i] / base
  }'

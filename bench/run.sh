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

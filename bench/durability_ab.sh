#!/usr/bin/env bash
# bench/durability_ab.sh REV [PAIRS] [SECONDS]: sync = "disk" throughput of
# this tree's library against the library of git revision REV, both
# linked into this tree's bench/durability.c, run in PAIRS (default 6)
# pairs that alternate which goes first (each run: 5 rounds of SECONDS,
# default 0.3, per measure). Prints, for one writer, 32 writers in one
# process and 32 writers in 4 processes, each pair's ratio of the run
# medians (this tree over REV), then min/median/max over the pairs.
# Needs build/libresv.a (make) and git.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build}
rev=${1:?usage: bench/durability_ab.sh REV [PAIRS] [SECONDS]} pairs=${2:-6} seconds=${3:-0.3}
out=$(mktemp -d /tmp/resv-durability-ab.XXXXXX)
trap 'rm -rf "$out"' EXIT
git -C "$here" archive "$rev" | tar -x -C "$out" --one-top-level=old
make -s -C "$out/old" O="$out/old/build" "$out/old/build/libresv.a" >/dev/null
link() { # library, binary
  cc -std=c11 -D_GNU_SOURCE -O2 -I"$here/csrc" $(pkg-config --cflags libmongoc-1.0) \
    -o "$2" "$here/bench/durability.c" "$here/bench/apm.c" "$1" \
    $(pkg-config --libs libmongoc-1.0) -llmdb -lpthread \
    -Wl,--wrap=mongoc_client_pool_new_with_error -Wl,--wrap=mongoc_client_new_from_uri_with_error
}
link "$out/old/build/libresv.a" "$out/old.bin"
link "$here/$O/libresv.a" "$out/new.bin"
run() { "$out/$1.bin" "$seconds" 5 | sed -n "s/^figure disk_\(.*\)_rate_median /$1 \1 /p"; }
for ((p = 1; p <= pairs; p++)); do
  if ((p % 2)); then run old; run new; else run new; run old; fi >"$out/pair$p"
done
echo "== sync = \"disk\" throughput, this tree over $rev, $pairs pairs (load $(cut -d' ' -f1-3 /proc/loadavg))"
for m in one_writer 32_writers 4_processes; do
  for ((p = 1; p <= pairs; p++)); do
    awk -v m="$m" '$2 == m { r[$1] = $3 } END { printf "%.3f\n", r["new"] / r["old"] }' "$out/pair$p"
  done | sort -n | awk -v m="$m" '{ v[NR] = $1 } END {
    printf "  %-12s min %.2fx  median %.2fx  max %.2fx\n", m, v[1], (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR] }'
done

#!/usr/bin/env bash
# bench/nginx_churn.sh [KEYS] [SECONDS] [GRACE_MS]: a churn of KEYS
# distinct keys (default 4,000,000, "user<i>@example.com"), each reserved
# once with a 1 s ttl and never confirmed, inside one nginx worker: once
# through the memory store (resv.open{ sweep_grace_ms = GRACE_MS, default
# 1000 }, users:reserve(key, owner, attempt, 1000)) and once through
# ngx.shared.DICT:add(key, value, 1) on a zone of DICT_SIZE (default 64m,
# so it never fills). Each runs in its own private nginx
# (bench/nginx/churn.*, one worker, a free loopback port, under `timeout`),
# so neither inherits the other's heap.
#
# Time: the DICT expires on the wall clock (ngx_time), so both runs use it;
# the memory store's clock is the system clock (no set_time). Advancing only
# the store's clock (as bench/churn.c does) would give it an exact window
# while the DICT's window grew whenever the worker fell behind, so instead
# both spread their KEYS calls evenly over SECONDS of wall time (default 20,
# i.e. 200,000 keys/s): batches of one millisecond's worth of calls, the
# request sleeping (ngx.sleep) whenever it is ahead of schedule. Both then
# see the same schedule, about KEYS/SECONDS keys live at any time, and
# SECONDS / (ttl + grace) = 10 periods of ttl + grace pass in a run. The
# achieved time of each run is printed: on a loaded machine a run that
# falls behind its schedule by more than 10 ms moves the rest of it later
# (never a burst to catch up, which would put more keys in the ttl than
# KEYS/SECONDS and could fill the zone), and says by how much in all.
# nginx's cached clock, which the DICT's expiry reads, is updated after
# every batch (ngx.update_time), since the worker only yields when ahead.
#
# Every KEYS/40 keys the worker samples its RSS (/proc/self/statm) and, for
# the memory store, the entries and bytes of store:stats(); for the DICT,
# the zone's bytes in use (capacity - free_space()). Prints a table and
# writes $BENCH_OUT/churn.dat (default build/bench) for bench/plots.gp.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build}
out=${BENCH_OUT:-$here/$O/bench}
keys=${1:-4000000} seconds=${2:-20} grace_ms=${3:-1000}
ttl_ms=1000 dict_size=${DICT_SIZE:-64m}
mkdir -p "$out"
work=$(mktemp -d /tmp/resv-bench-churn.XXXXXX)
pid=
stop() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
  fi
}
trap 'stop; rm -rf "$work"' EXIT

# run_one resv|dict: a fresh nginx in $work/<store>, one request, its
# answer in $work/<store>.out. (Not in a $(...): the trap must see $pid.)
run_one() {
  local port prefix=$work/$1
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$prefix/tmp"
  chmod 755 "$work" "$prefix"
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$port|g" -e "s|@REPO@|$here|g" \
    -e "s|@O@|$O|g" -e "s|@DICT@|$dict_size|g" \
    "$here/bench/nginx/churn.conf.in" >"$prefix/nginx.conf"
  timeout $((seconds * 4 + 120)) nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log" \
    </dev/null >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.05
  done
  curl -sf --max-time $((seconds * 4 + 100)) -o "$work/$1.out" \
    "http://127.0.0.1:$port/run?store=$1&n=$keys&seconds=$seconds&ttl_ms=$ttl_ms&grace_ms=$grace_ms" || {
    echo "nginx_churn: the $1 run failed:" >&2
    tail -20 "$prefix/error.log" >&2
    exit 1
  }
  stop
}

run_one resv
run_one dict
resv=$(cat "$work/resv.out") dict=$(cat "$work/dict.out")
elapsed() {
  awk '$1 == "elapsed_ms" { e = $2 } $1 == "late_ms" { l = $2 }
       END { printf "%.1f s (%.1f s behind schedule)", e / 1000, l / 1000 }' <<<"$1"
}
dat=$out/churn.dat
{
  echo "# bench/nginx_churn.sh $keys $seconds: ttl $ttl_ms ms, grace $grace_ms ms, DICT zone $dict_size"
  echo "# keys resv_rss_kb dict_rss_kb resv_entries resv_bytes dict_used_kb resv_s dict_s"
  # Both runs sample at the same key counts (0, KEYS/40, ...), row by row.
  paste -d ' ' <(awk '$1 == "sample" { print $2, $4, $5, $6, $3 / 1000 }' <<<"$resv") \
    <(awk '$1 == "sample" { print $2, $4, int($5 / 1024), $3 / 1000 }' <<<"$dict") |
    awk '$1 != $6 { print "nginx_churn: samples differ" > "/dev/stderr"; exit 1 }
         { print $1, $2, $7, $3, $4, $8, $5, $9 }'
} >"$dat"
echo "== 10b. churn in nginx: $keys distinct keys, ttl $ttl_ms ms, over $seconds s of wall time, one worker"
echo "  memory store (sweep_grace_ms $grace_ms) took $(elapsed "$resv"); ngx.shared.DICT:add ($dict_size zone) $(elapsed "$dict")"
echo "  (zone kB: capacity - free_space(), in whole pages; s: wall time since the first call, on schedule at KEYS/SECONDS a second)"
printf '  %10s %12s %12s %12s %14s %13s %7s %7s\n' keys "resv RSS kB" "DICT RSS kB" "resv entries" "resv bytes" "DICT zone kB" "resv s" "DICT s"
awk '!/^#/ { printf "  %10d %12d %12d %12d %14d %13d %7.2f %7.2f\n", $1, $2, $3, $4, $5, $6, $7, $8 }' "$dat"
awk '!/^#/ { n++; r[n] = $2; d[n] = $3 } END {
  h = int(n / 2) + 1
  printf "  RSS: resv %d -> %d kB (second half %d..%d), DICT %d -> %d kB (second half %d..%d)\n",
    r[1], r[n], min(r, h, n), max(r, h, n), d[1], d[n], min(d, h, n), max(d, h, n)
}
function min(a, i, j,  m, k) { m = a[i]; for (k = i; k <= j; k++) if (a[k] < m) m = a[k]; return m }
function max(a, i, j,  m, k) { m = a[i]; for (k = i; k <= j; k++) if (a[k] > m) m = a[k]; return m }' "$dat"
echo "  data: $dat"

#!/usr/bin/env bash
# bench/nginx_embedded.sh KEYS ROUNDS: the memory store and the file store
# against ngx.shared.DICT:add in one private nginx (bench/nginx/embedded.*), on a
# free loopback port. Prints the figures and the throughput ratios, and
# reserve_all of 2 keys over one reserve (each round's own ratio).
# nginx runs under `timeout`, and is stopped by its pid when we are done.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
O=${O:-build}
keys=${1:-100000} rounds=${2:-5}
prefix=$(mktemp -d /tmp/resv-bench-nginx.XXXXXX)
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$prefix/tmp" "$prefix/store"
# The worker (nobody, when we are root) makes the file store's files.
chmod 755 "$prefix"
chmod 777 "$prefix/store"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$port|g" -e "s|@REPO@|$here|g" -e "s|@O@|$O|g" \
  "$here/bench/nginx/embedded.conf.in" >"$prefix/nginx.conf"
timeout 300 nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$prefix"' EXIT
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/" && break
  sleep 0.05
done
body=$(curl -sf --max-time 240 "http://127.0.0.1:$port/run?n=$keys&rounds=$rounds") || {
  echo "nginx_embedded: the benchmark request failed:" >&2
  tail -20 "$prefix/error.log" >&2
  exit 1
}
fig() { awk -v k="$1" '$1 == "figure" && $2 == k { print $3 }' <<<"$body"; }
row() { # label, ns figure, ratio figure
  local ns; ns=$(fig "$2")
  printf '  %-52s %8.1f %10.0f %6.2f\n' "$1" "$ns" "$(awk -v x="$ns" 'BEGIN{print 1e9/x}')" "$3"
}
echo "== 4. memory store in nginx vs ngx.shared.DICT:add ($keys keys x $rounds rounds, medians, one worker)"
printf '  %-52s %8s %10s %6s\n' "operation" "ns/op" "ops/s" "ratio"
row "dict:add, new keys (baseline)" dict_new_ns 1
row "users:reserve, new keys" resv_new_ns "$(fig resv_new_ratio)"
row "  the same, answering into a reused table" into_new_ns "$(fig into_new_ratio)"
row "  floor: raw FFI resv_call, no checks, no table" raw_new_ns "$(fig raw_new_ratio)"
row "dict:add, existing keys (baseline)" dict_conflict_ns 1
row "users:reserve, held keys (conflict)" resv_conflict_ns "$(fig resv_conflict_ratio)"
row "  the same, answering into a reused table" into_conflict_ns "$(fig into_conflict_ratio)"
row "  floor: raw FFI resv_call, no checks, no table" raw_conflict_ns "$(fig raw_conflict_ratio)"
row "users:reserve on the file store (sync=process), new keys" file_new_ns "$(fig file_new_ratio)"
row "  floor: raw FFI resv_call, no checks, no table" file_raw_new_ns "$(fig file_raw_new_ratio)"
row "users:reserve on the file store, held keys (conflict)" file_conflict_ns "$(fig file_conflict_ratio)"
row "  floor: raw FFI resv_call, no checks, no table" file_raw_conflict_ns "$(fig file_raw_conflict_ratio)"
awk -v a="$(fig file_new_ratio)" -v b="$(fig file_conflict_ratio)" 'BEGIN {
  printf "  file store goal (sync=process) >= 0.3x the shared dict for new keys, >= 1.0x for conflicts: %s (%.2fx, %.2fx)\n",
    (a >= 0.3 && b >= 1.0) ? "met" : "NOT met", a, b }'
for v in resv:"fresh answers" into:"{ into = r }"; do
  awk -v a="$(fig "${v%%:*}_new_ratio")" -v b="$(fig "${v%%:*}_conflict_ratio")" -v w="${v#*:}" 'BEGIN {
    printf "  goal >= 1.5x the shared dict, %s: %s (reserve %.2fx, conflict %.2fx)\n",
      w, (a >= 1.5 && b >= 1.5) ? "met" : "NOT met", a, b }'
done
row "users:reserve_all of 2 new keys, fresh answers" all_new_ns "$(awk -v x="$(fig all_new_ns)" -v d="$(fig dict_new_ns)" 'BEGIN{print d/x}')"
awk -v a="$(fig all_over_reserve)" -v lo="$(fig all_over_reserve_min)" -v hi="$(fig all_over_reserve_max)" 'BEGIN {
  printf "  goal reserve_all of 2 keys <= 1.3x one reserve (per round, fresh answers): %s (%.2fx, min %.2f, max %.2f)\n",
    (a <= 1.3) ? "met" : "NOT met", a, lo, hi }'

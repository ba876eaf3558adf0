#!/usr/bin/env bash
# bench/callgrind_several.sh [memory|file-process|file-disk] [PAIRS]:
# user-space instructions of each way of bench/several.c under callgrind,
# a pair (a "call" below is one pair: one reserve of one key, two
# reserves, one reserve_all of two keys, ...; make build/bench/several
# first, O= for another build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
exec "$here/bench/callgrind_dumps.sh" "$here/${O:-build}/bench/several" "${1:-memory}" "${2:-20000}"

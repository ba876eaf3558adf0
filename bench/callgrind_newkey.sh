#!/usr/bin/env bash
# bench/callgrind_newkey.sh [KEYS] [s][t]: user-space instructions a
# call of the file store (sync = process) under callgrind: a reserve of a
# new key and a reserve that answers conflict, through resv_call (with t:
# resv_try_call, the call of a host that must not block)
# (bench/newkey.c; make build/bench/newkey first, O= for another build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
keys=${1:-20000}
shift || true
exec "$here/bench/callgrind_dumps.sh" "$here/${O:-build}/bench/newkey" "$keys" "$@"

#!/bin/bash
# model/replay.sh REPLAY [N]: twice N random traces of the model (SPIN's
# random simulation, seeds 1 to N; default 200) at the issue's full size,
# three owners of two attempts each on two keys, ttl 2, the clock from 0
# to 4, replayed by REPLAY (model/replay.c, built by make) against the
# memory store.
set -euo pipefail
bin=$(realpath "$1")
n=${2:-200}
here=$(cd "$(dirname "$0")" && pwd)
# spin leaves pan.pre where it runs: run it in a folder of its own
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Two sets of traces. Stale clocks: an operation runs on the clock it read
# at its start, however late its write lands; no sweep, and a grace the
# store never reaches, so it reclaims nothing on its own either. Sweeps:
# two sweeps, a grace of 1 for them and for the store's own reclaiming, and
# every operation at the clock of its step (a call on a stale clock after
# a reclaim at a later one meets a key the model still has: model/README.md).
SIZE="-DATT0=2 -DATT1=2 -DATT2=2 -DNKEY=2 -DTTL=2 -DMAXT=4 -DREPLAY"
traces() {
  for seed in $(seq 1 "$n"); do
    echo "TRACE $2 $seed"
    # shellcheck disable=SC2086
    ${SPIN:-spin} $SIZE $1 -T -n"$seed" -u100000 "$here/resv.pml"
  done
}
traces "-DSWEEPS=0" stale-clocks | "$bin" 1000000
traces "-DSWEEPS=2 -DGRACE=1 -DFRESH_NOW" sweeps | "$bin" 1

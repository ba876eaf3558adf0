#!/bin/bash
# model/replay.sh REPLAY [N]: N random traces of the model (SPIN's random
# simulation, seeds 1 to N; default 200) at the issue's full size, three
# owners of two attempts each on two keys, ttl 2, the clock from 0 to 4,
# replayed by REPLAY (model/replay.c, built by make) against the memory
# store. No sweep: the memory store has none to replay it against.
set -euo pipefail
bin=$(realpath "$1")
n=${2:-200}
here=$(cd "$(dirname "$0")" && pwd)
# spin leaves pan.pre where it runs: run it in a folder of its own
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
SIZE="-DATT0=2 -DATT1=2 -DATT2=2 -DNKEY=2 -DTTL=2 -DMAXT=4 -DSWEEPS=0 -DREPLAY"
for seed in $(seq 1 "$n"); do
  echo "TRACE seed $seed"
  # shellcheck disable=SC2086
  ${SPIN:-spin} $SIZE -T -n"$seed" -u100000 "$here/resv.pml"
done | "$bin"

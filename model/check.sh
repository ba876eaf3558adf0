#!/bin/sh
# model/check.sh: SPIN over model/resv.pml, exhaustively, at the sizes of
# model/README.md, then every planted mutant, each of which SPIN must catch
# with the property named for it. Exits non-zero when the model fails or a
# mutant passes. Prints each run's states and seconds, and the total time.
#
#   model/check.sh          what `make model` runs
#   model/check.sh quick    small sizes and five mutants (`make test`)
#
# MODEL_O names the work folder (default build/model); SPIN and CC the tools;
# ONLY a pattern of the runs to do (e.g. ONLY='M_*').
set -eu

SPIN=${SPIN:-spin}
CC=${CC:-cc}
OUT=${MODEL_O:-build/model}
HERE=$(cd "$(dirname "$0")" && pwd)
MEMLIM=${MODEL_MEMLIM:-4000} # MB; a run that needs more fails, never swaps
mkdir -p "$OUT"
failed=0
start=$(date +%s)

# run NAME EXPECT DEFINES...: EXPECT is "pass", or a word the violated
# assertion must contain (the property's flag).
run() {
  name=$1 expect=$2
  shift 2
  case $name in ${ONLY:-*}) ;; *) return 0 ;; esac
  dir=$OUT/$name
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$HERE/resv.pml" "$dir/"
  t0=$(date +%s)
  # A mutant fails within a few states: -O0 compiles six times faster.
  opt=-O2; [ "$expect" = pass ] || opt=-O0
  (cd "$dir" && "$SPIN" "$@" -a resv.pml >spin.log 2>&1 &&
    $CC $opt -w -DSAFETY -DCOLLAPSE -DMEMLIM="$MEMLIM" -o pan pan.c >cc.log 2>&1) || {
    echo "model: $name: spin or cc failed:"; cat "$dir/spin.log" "$dir/cc.log" 2>/dev/null || true
    failed=1; return 0
  }
  (cd "$dir" && ./pan -m200000 -w24 >pan.log 2>&1) || true
  secs=$(($(date +%s) - t0))
  states=$(sed -n 's/^ *\([0-9][0-9]*\) states, stored.*/\1/p' "$dir/pan.log")
  violated=$(sed -n 's/^pan:1: \(.*\) (at depth.*/\1/p' "$dir/pan.log")
  if grep -q 'out of memory\|Search not completed' "$dir/pan.log" && [ -z "$violated" ]; then
    echo "model: $name: FAIL: search not completed ($states states, ${secs}s)"
    failed=1
  elif [ "$expect" = pass ]; then
    if [ -z "$violated" ] && grep -q 'errors: 0' "$dir/pan.log"; then
      echo "model: $name: ok, exhaustive: $states states, ${secs}s ($*)"
    else
      echo "model: $name: FAIL: $violated (trail: $dir/resv.pml.trail; spin -t -p $* resv.pml there)"
      failed=1
    fi
  else
    case $violated in
    *"$expect"*)
      echo "model: $name: caught: $violated, after $states states, ${secs}s" ;;
    *)
      echo "model: $name: FAIL: mutant not caught by $expect (${violated:-it passed}, $states states)"
      failed=1 ;;
    esac
  fi
}

# Sizes (model/README.md): three owners of one attempt each on two keys,
# and three owners, the first with two attempts, on one key; ttl 1, the
# clock from 0 to 2, a sweep with a grace of 1.
THREE="-DATT0=1 -DATT1=1 -DATT2=1 -DNKEY=2 -DTTL=1 -DMAXT=2 -DGRACE=1"
TWO_ATT="-DATT0=2 -DATT1=1 -DATT2=1 -DNKEY=1 -DTTL=1 -DMAXT=2 -DGRACE=1"
FAIL_SZ="-DATT0=1 -DATT1=1 -DATT2=0 -DNKEY=1 -DTTL=1 -DMAXT=2 -DSWEEPS=0 -DFAILOVER"
QUICK="-DATT0=2 -DATT1=1 -DATT2=0 -DNKEY=1 -DTTL=1 -DMAXT=2 -DGRACE=1"
# A reserve_all of both keys by a third owner, against one or two owners
# of one attempt each.
ALL_SZ="-DATT0=1 -DATT1=1 -DATT2=0 -DNKEY=2 -DTTL=1 -DMAXT=2 -DGRACE=1 -DALL"
ALL_Q="-DATT0=1 -DATT1=0 -DATT2=0 -DNKEY=2 -DTTL=1 -DMAXT=2 -DGRACE=1 -DALL"

if [ "${1:-}" = quick ]; then
  # shellcheck disable=SC2086
  run quick pass $QUICK
  run quick-holds hold_lost $QUICK -DM_HOLDS
  run quick-lte confirmed_lost $QUICK -DM_LTE
  run quick-reread tries $QUICK -DM_NOREREAD
  run quick-kept kept_gone $QUICK -DM_KEPT_LATE
  run quick-all pass $ALL_Q
  run quick-all-takeback left_hold $ALL_Q -DM_ALL_NO_TAKEBACK
else
  # shellcheck disable=SC2086
  {
  run three-owners-two-keys pass $THREE
  run two-attempts pass $TWO_ATT
  run failover-majority pass $FAIL_SZ
  run reserve-all pass $ALL_SZ
  # The mutants, each with the property that must catch it.
  run M_LTE confirmed_lost $THREE -DM_LTE
  run M_NO_KEEP confirmed_lost $TWO_ATT -DM_NO_KEEP
  run M_JOIN_NOMAX false_answer $TWO_ATT -DM_JOIN_NOMAX
  run M_JOIN_NOMAX-grant double_grant $TWO_ATT -DM_JOIN_NOMAX -DGRANT_ONLY
  run M_RETURN_OLD false_answer $TWO_ATT -DM_RETURN_OLD
  run M_HOLDS hold_lost $TWO_ATT -DM_HOLDS
  run M_NE_NULL confirmed_lost $TWO_ATT -DM_NE_NULL
  run M_SWEEP_CONF confirmed_lost $THREE -DM_SWEEP_CONF
  run M_RELEASE_ANY hold_lost $THREE -DM_RELEASE_ANY
  run M_NOREREAD tries $THREE -DM_NOREREAD
  run M_FRESHNOW tries $THREE -DM_FRESHNOW
  run W1-rollback double_grant $FAIL_SZ -DW1 -DGRANT_ONLY
  # The finding of model/README.md ("What SPIN found"), now fixed: abandon
  # answering kept from its delete, as it did, is caught.
  run M_KEPT_LATE kept_gone $TWO_ATT -DM_KEPT_LATE
  run M_ALL_NO_TAKEBACK left_hold $ALL_Q -DM_ALL_NO_TAKEBACK
  run M_ALL_FIRST false_answer $ALL_Q -DM_ALL_FIRST
  }
fi

echo "model: $(($(date +%s) - start))s in all"
exit $failed

#!/usr/bin/env bash
# WEIGHT_L2_HINT: the weight loads (ldw) with an L2 prefetch-size hint (1: .L2::256B, SASS LTC256B) or
# that and an evict-first cache policy (2: createpolicy + .L2::cache_hint; ptxas: 32 / 28 bytes of
# spills in the GEMV kernels), against the defaults. Checks first: the tiny op check per variant (hints
# change no arithmetic: its statistics must equal the default's), quick_27b's graph vs megakernel bits;
# then quick_27b alternated (hint 1, default, hint 2, hint 1, default). Run with carry
# ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
synth_all
ops_tiny_with "" _default "verdict"
for v in 1 2; do
  ops_tiny_with "WEIGHT_L2_HINT=$v" _hint$v "verdict"
  if diff -q "$R/gpu_ops/tiny_default.txt" "$R/gpu_ops/tiny_hint$v.txt" > /dev/null; then
    echo "   op statistics identical to the default's" | log
  else
    echo "   op statistics DIFFER from the default's" | log
  fi
done
wait $synth_pid
quick_27b "" "WEIGHT_L2_HINT=1"
quick_27b "" ""
quick_27b "" "WEIGHT_L2_HINT=2"
quick_27b "" "WEIGHT_L2_HINT=1"
quick_27b "" ""
finish

#!/usr/bin/env bash
# gpu_small judged by its envelope (logits and tokens against the noise twin) and the envelope's
# negative control (MK_BREAK_ROPE must be OUTSIDE), with the new defaults (balanced unit shapes,
# UNIT_SYNC=1): quick_27b, long_27b, the tiny checks; in one device call (about 7 minutes).
# Build here, gzip the stripped binary to devbin/mk.gz, run from the repository root with
# carry ["devbin/mk.gz"] and MK=/tmp/mk after unpacking it.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( timeout 400 $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" > "$R/gpu_small.txt" 2>&1; echo "exit $?" >> "$R/gpu_small.txt"
  MK_CUDA_DEFINES=MK_BREAK_ROPE timeout 150 $MK run experiments/gpu_small_negative.ron --cache /tmp/mkcache --results "$R" > "$R/gpu_small_negative.txt" 2>&1
  echo "exit $?" >> "$R/gpu_small_negative.txt" ) &
bg_pid=$!
tiny_checks
quick_27b "" ""
long_27b 200 "kernel "
wait_for $bg_pid "$R/gpu_small.txt" "$R/gpu_small_negative.txt"
finish drop-traces

#!/usr/bin/env bash
# For the next device session (not yet run): GEMV unit rows 8 / 16 / 32 with unit tickets (the
# megakernel's joins wait on the last units of a word: finer units, shorter tails; the first
# balanced version's 8-row gate/up units lost before tickets, results/balanced_0b2f3f9), the megakernel
# with out-of-line ops at 2 blocks per SM streaming its GEMVs, then gpu_small (the split recurrence
# against the CPU within the envelope) in the remaining time.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 500
quick_27b "" ""
quick_27b "--unit-rows 8" ""
quick_27b "--unit-rows 32" ""
quick_27b "" "MEGA_NOINLINE=1 MEGA_BLOCKS_PER_SM=2 MEGA_GEMV_STREAM=1"
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

#!/usr/bin/env bash
# Discrete GEMV units handed out by ticket (GEMV_DYNAMIC) and the megakernel's L2 prefetch of a unit's
# weights while it waits (MEGA_PREFETCH): the checks (ops, gpu_tiny, the megakernel's identity and its
# negative control, gpu_small's envelope in the background: also the recheck after the CPU norm-order
# change), then quick_27b with the defaults, with both off (the previous defaults), and two variants
# (the megakernel at 2 blocks per SM, the GEMV kernels at 3).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 330
tiny_checks
quick_27b "" ""
quick_27b "" "GEMV_DYNAMIC=0 MEGA_PREFETCH=0"
quick_27b "" "MEGA_BLOCKS_PER_SM=2"
quick_27b "" "GEMV_MIN_BLOCKS=3"
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

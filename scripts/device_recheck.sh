#!/usr/bin/env bash
# For the next device session: the checks again after the CPU reference took the GPU's new norm orders
# (hidden norms over 16-byte chunks, the gated norm over bf16 pairs): ops (its tolerance), gpu_tiny,
# the megakernel's identity and negative control, gpu_small's envelope (background); then quick_27b with
# the defaults and two untried variants: the megakernel at 2 blocks per SM with dot_rows (its GDN
# recurrence ran twice the graph's time at 3 blocks, 80 registers), and the stream at 3 blocks per SM.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 330
tiny_checks
quick_27b "" ""
quick_27b "" "MEGA_BLOCKS_PER_SM=2"
quick_27b "" "GEMV_MIN_BLOCKS=3"
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

#!/usr/bin/env bash
# The discrete GEMV preps in one round trip (block_rmsnorm with x kept and the norm weight prefetched;
# the gated norm's loads of a warp's heads issued first) on top of fp8_stream: ops check, gpu_tiny, the
# megakernel's per-instruction identity and its negative control, gpu_small's envelope (background),
# quick_27b and long_27b (1K/4K/32K).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 330
tiny_checks
quick_27b "" ""
long_27b 230 "kernel "
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

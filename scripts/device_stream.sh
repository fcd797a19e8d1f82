#!/usr/bin/env bash
# The discrete fp8 GEMV through fp8_stream (x shared by a warp's rows, the next item's loads before this
# item's arithmetic, first loads before the norm) at 2 blocks per SM; the megakernel keeps dot_rows
# (MEGA_GEMV_STREAM=0). Checks: ops (also the unpipelined register path), gpu_tiny, the megakernel's
# per-instruction identity and its negative control, gpu_small's envelope (background); timings:
# quick_27b (defaults, and the megakernel with fp8_stream at 2 blocks per SM), long_27b (1K/4K/32K).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 400
ops_tiny
MK_CUDA_DEFINES="GEMV_PIPE=0" tiny_checks
quick_27b "" ""
quick_27b "" "MEGA_GEMV_STREAM=1 MEGA_BLOCKS_PER_SM=2"
long_27b 230 "kernel "
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

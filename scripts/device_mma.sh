#!/usr/bin/env bash
# The pipelined tensor-core GEMV (GEMV_MMA=1: 128-wide chunks a warp, MMA_AHEAD items in flight): its
# checks on tiny (the op check, reference vs graph, the megakernel's identity, the negative controls),
# gpu_small's envelope in the background, then quick_27b: defaults against MMA_AHEAD 1 / 2 / 3.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
export MK_CUDA_DEFINES="GEMV_MMA=1"
small_in_background 540
tiny_checks
echo "== negative control: ops tiny with MK_BREAK_GEMV (must fail)" | log
MK_CUDA_DEFINES="GEMV_MMA=1 MK_BREAK_GEMV=1" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache \
  > "$R/gpu_ops/negative_control_tiny.txt" 2>&1
tail -1 "$R/gpu_ops/negative_control_tiny.txt" | log
unset MK_CUDA_DEFINES
quick_27b "" ""
quick_27b "" "GEMV_MMA=1 MMA_AHEAD=1"
quick_27b "" "GEMV_MMA=1 MMA_AHEAD=2"
quick_27b "" "GEMV_MMA=1 MMA_AHEAD=3"
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

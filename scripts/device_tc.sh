#!/usr/bin/env bash
# RING_TC: the GEMV weight ring's consumers on tensor cores (16-row x k-group items by one tensor copy
# each, warp w = chunk w, mma_unit_bs's arithmetic; the megakernel and k_* take GEMV_MMA's path: the
# same bits). Checks: the op check on tiny (k_* tensor-core kernels: widths under 1,024 have no tensor
# map) and through the ring on small against the CPU, its negative control on small (RING_BREAK: must
# fail); the megakernel against the graph on small (bits). Then quick_27b (graph vs megakernel, identical) with and without
# RING_TC, and ring_probe (graph only, context 16): the ring's mechanics alone (RING_NOCOMPUTE) and depth.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_tiny_with "RING_TC=1" "_tc" "verdict|error"
ops_small "RING_TC=1" "_tc"
grep -q "verdict: ok" "$R/gpu_ops/small_tc.txt" || { finish; exit 0; }
ops_small "RING_TC=1 RING_BREAK=1" "_tc_break"
export MK_CUDA_DEFINES="RING_TC=1"
run_checks mega_small
unset MK_CUDA_DEFINES
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" "RING_TC=1"
quick_27b "" ""
probe "RING_TC=1 RING_NOCOMPUTE=1"
probe "RING_TC=1 RING_BLOCKS=2"
finish drop-traces

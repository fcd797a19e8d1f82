#!/usr/bin/env bash
# GEMV_RING, fourth version: an item's pieces dealt to the consumer warps in turn (every warp works on
# every item; whole-row units' partials through shared memory, summed per row in group order at the
# unit's end). Checks: the op check through the ring kernels and its negative control RING_BREAK=1 (must
# FAIL), gpu_tiny against the CPU reference, the megakernel against the ring graph per instruction;
# then quick_27b defaults / ring, block 0's item stamps (RING_STAMPS=300), 2 blocks per SM x 6 slots.
# (Third version: results/ring3_ea76f3b.) Run from the repository root with carry ["devbin/mk.xz"] and
# MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
for v in "GEMV_RING=1" "GEMV_RING=1 RING_BREAK=1"; do ops_tiny_with "$v" "_${v// /_}" "verdict|error"; done
MK_CUDA_DEFINES="GEMV_RING=1" run_checks gpu_tiny mega_tiny_debug
echo "== synth 27B ($(el) s)" | log
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" ""
quick_27b "" "GEMV_RING=1"
echo "== ring_probe 'GEMV_RING=1 RING_STAMPS=300' ($(el) s)" | log
MK_CUDA_DEFINES="GEMV_RING=1 RING_STAMPS=300" timeout 90 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
  | grep -E "ms/token|^ring |kernel Gemv|error" > "$R/ring_stamps.txt"
grep -vE "^ring item" "$R/ring_stamps.txt" | log
grep -E "^ring item" "$R/ring_stamps.txt" | sed -n '1,4p;20,28p' | log
quick_27b "" "GEMV_RING=1 RING_BLOCKS=2 RING_SLOTS=6"
finish drop-traces

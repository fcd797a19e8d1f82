#!/usr/bin/env bash
# GEMV_RING (megakernel/ring.cu): the discrete GEMVs' weights through one block-wide shared-memory ring
# fed by bulk copies across units. Checks first (the op check on tiny through the ring kernels, gpu_tiny
# against the CPU reference, the megakernel (dot_rows) against the ring graph per instruction), then
# quick_27b: defaults, the ring (1 block per SM, 12 slots), without the early copies, at 2 blocks per SM
# with 6 slots each; and ATTN_PROLOGUE=0 (the megakernel lost 1 % at context 16 with the reworks on).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
echo "== ops tiny GEMV_RING=1 ($(el) s)" | log
MK_CUDA_DEFINES="GEMV_RING=1" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache \
  > "$R/gpu_ops/tiny_ring.txt" 2>&1
grep -E "^Gemv|verdict|error" "$R/gpu_ops/tiny_ring.txt" | log
MK_CUDA_DEFINES="GEMV_RING=1" run_checks gpu_tiny mega_tiny_debug
quick_27b "" ""
quick_27b "" "GEMV_RING=1"
quick_27b "" "GEMV_RING=1 RING_EARLY=0"
quick_27b "" "GEMV_RING=1 RING_BLOCKS=2 RING_SLOTS=6"
quick_27b "" "ATTN_PROLOGUE=0"
finish drop-traces

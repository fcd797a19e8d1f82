#!/usr/bin/env bash
# GEMV_RING (megakernel/ring.cu): the discrete GEMVs' weights through one block-wide shared-memory ring
# fed by bulk copies across units. Checks first (the op check on tiny through the ring kernels, gpu_tiny
# against the CPU reference, the megakernel (dot_rows) against the ring graph per instruction), then
# quick_27b: defaults, the ring (1 block per SM, 12 slots), without the early copies, at 2 blocks per SM
# with 6 slots each, with 8 slots. RING_BREAK=1 is the op check's negative control (it must fail).
# (Second version: one bulk copy per 16 KB item; the first, 16 copies of 1 KB per item, ran 4.5x slower.)
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
for v in "GEMV_RING=1" "GEMV_RING=1 RING_BREAK=1"; do
  echo "== ops tiny '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache \
    > "$R/gpu_ops/tiny_${v// /_}.txt" 2>&1
  grep -E "^Gemv|verdict|error" "$R/gpu_ops/tiny_${v// /_}.txt" | log
done
MK_CUDA_DEFINES="GEMV_RING=1" run_checks gpu_tiny mega_tiny_debug
quick_27b "" ""
quick_27b "" "GEMV_RING=1"
quick_27b "" "GEMV_RING=1 RING_BLOCKS=2 RING_SLOTS=6"
quick_27b "" "GEMV_RING=1 RING_SLOTS=8"
quick_27b "" "GEMV_RING=1 RING_EARLY=0"
finish drop-traces

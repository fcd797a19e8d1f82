#!/usr/bin/env bash
# GEMV_RING (megakernel/ring.cu), third version (a producer warp; words decoded once into shared memory;
# block scales staged by the producer; not yet run): the discrete GEMVs' weights through one block-wide
# shared-memory ring fed by bulk copies across units. Checks first: the op check on tiny through the ring
# kernels and its negative control RING_BREAK=1 (it must FAIL), gpu_tiny against the CPU reference, the
# megakernel (dot_rows) against the ring graph per instruction; then the ring's mechanics alone
# (RING_NOCOMPUTE=1) and without the arithmetic (GEMV_READ_ONLY=1), wrong results by design, graph only;
# block 0's per-item clock64 stamps of one warm launch (RING_STAMPS=300: issue, slot free, landing, warps
# 0 and 7 done, in ring_stamps.txt); then quick_27b: defaults, the ring (1 block per
# SM, 12 slots), 2 blocks per SM with 6 slots each, 8 slots, without the early copies.
# (First and second versions: results/ring_37e2404, results/ring_d03d3b7, results/ringdiag_b5e5ad1.)
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny_with "" "" "verdict|error"  # the default kernels (their joins are BLOCK_SYNC now)
for v in "GEMV_RING=1" "GEMV_RING=1 RING_BREAK=1"; do ops_tiny_with "$v" "_${v// /_}" "^Gemv|verdict|error"; done
MK_CUDA_DEFINES="GEMV_RING=1" run_checks gpu_tiny mega_tiny_debug
for v in "GEMV_RING=1 RING_NOCOMPUTE=1" "GEMV_RING=1 GEMV_READ_ONLY=1"; do
  echo "== ring_probe '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Gemv|error" | log
done
# block 0's item stamps (clock64) of the 300th ring launch: issue, slot free, landing, warps 0 and 7 done
echo "== ring_probe 'GEMV_RING=1 RING_STAMPS=300' ($(el) s)" | log
MK_CUDA_DEFINES="GEMV_RING=1 RING_STAMPS=300" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
  | grep -E "ms/token|^ring |error" > "$R/ring_stamps.txt"
head -24 "$R/ring_stamps.txt" | log
quick_27b "" ""
quick_27b "" "GEMV_RING=1"
quick_27b "" "GEMV_RING=1 RING_BLOCKS=2 RING_SLOTS=6"
quick_27b "" "GEMV_RING=1 RING_SLOTS=8"
quick_27b "" "GEMV_RING=1 RING_EARLY=0"
finish drop-traces

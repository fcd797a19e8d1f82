#!/usr/bin/env bash
# The fp8 GEMV's per-warp cp.async weight ring (fp8_ring; depth from the launch's shared memory) against
# the register paths: ops check and tiny checks (ring, and the register path), then quick_27b variants of
# blocks per SM (GEMV_MIN_BLOCKS: registers, and the ring depth that fits) and ring depth (GEMV_DEPTH).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny
MK_CUDA_DEFINES="GEMV_DEPTH=0 GEMV_PIPE=1" ops_tiny
run_checks gpu_tiny mega_tiny_debug
quick_27b "" "GEMV_MIN_BLOCKS=2"
quick_27b "" "GEMV_MIN_BLOCKS=2 GEMV_DEPTH=3"
quick_27b "" "GEMV_MIN_BLOCKS=3 GEMV_DEPTH=3"
quick_27b "" ""
quick_27b "" "GEMV_MIN_BLOCKS=2 GEMV_DEPTH=0 GEMV_PIPE=0"
quick_27b "" "GEMV_MIN_BLOCKS=2 GEMV_DEPTH=0 GEMV_PIPE=1"
find "$R" -name timeline.json -delete
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|diff:|ms/token|kernel Gemv|error" "$OUT/log.txt" | tail -60

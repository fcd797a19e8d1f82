#!/usr/bin/env bash
# The pipelined fp8 GEMV (fp8_stream: next item's loads before this item's arithmetic, the first loads
# before the norm) and the vectorised norm: ops check and tiny checks, then quick_27b variants of the
# GEMV's register budget (GEMV_MIN_BLOCKS) and GEMV_PIPE=0, and the SASS of k_gemv_gate_up.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny
run_checks gpu_tiny mega_tiny_debug
quick_27b "" ""
quick_27b "" "GEMV_MIN_BLOCKS=3"
quick_27b "" "GEMV_MIN_BLOCKS=2"
quick_27b "" "GEMV_PIPE=0"
for f in /tmp/mkcache/cubin/*.cubin; do
  /usr/local/cuda/bin/cuobjdump -sass -fun k_gemv_gate_up "$f" > "$R/sass_$(basename "$f" .cubin).txt" 2>&1 || true
done
find "$R" -name timeline.json -delete
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|diff:|ms/token|kernel Gemv|error" "$OUT/log.txt" | tail -40

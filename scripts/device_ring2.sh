#!/usr/bin/env bash
# Diagnostics of the GEMV ring's 3 GB/s per block (scripts/device_ring.sh: 62 vs 12.3 ms/token, with 8
# or 12 slots alike): RING_NOCOMPUTE=1 (consumers only wait and release: the ring's mechanics alone),
# GEMV_READ_ONLY=1 (fp8 arithmetic skipped), RING_SLOTS=2 (depth). Graph only, WRONG results by design
# for the first two. Run with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for v in "GEMV_RING=1 RING_NOCOMPUTE=1" "GEMV_RING=1 GEMV_READ_ONLY=1" "GEMV_RING=1 RING_SLOTS=2"; do
  echo "== ring_probe '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Gemv|error" | log
done
finish drop-traces

#!/usr/bin/env bash
# RING_TC diagnostics (graph only, 27B, context 16; WRONG RESULTS by design except the first): block 0's
# per-item stamps (RING_STAMPS: issue, slot free, landed for warp 0 / warp 7, done by warp 0 / warp 7),
# then the consumers without their arithmetic (TC_DIAG=1), without the unit ends (2), without both (3).
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
echo "== ring_probe 'RING_TC=1 RING_STAMPS=300' ($(el) s)" | log
MK_CUDA_DEFINES="RING_TC=1 RING_STAMPS=300" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache \
  --results "$R" 2>&1 | grep -E "ms/token|^ring |error" > "$R/ring_stamps_tc.txt"
grep -E "ms/token|^ring stamps|error" "$R/ring_stamps_tc.txt" | log
grep -E "^ring item" "$R/ring_stamps_tc.txt" | sed -n '1,3p;20,30p' | log
probe "RING_TC=1 TC_DIAG=1"
probe "RING_TC=1 TC_DIAG=2"
probe "RING_TC=1 TC_DIAG=3"
finish drop-traces

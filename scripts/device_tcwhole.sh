#!/usr/bin/env bash
# RING_TC with TC_WHOLE (NOT YET RUN: written 2026-12-01 after results/tcdiag_84719b1): a consumer warp
# computes a whole item (its 8 chunks in TC_ILP interleaved mma chains, the chunk sums added in chunk
# order within the lane: the same bits as the chunk-per-warp form and the megakernel's GEMV_MMA path),
# items dealt to the 8 warps in turn, one join per whole-row unit. Checks first (op check through the
# ring on small and its negative control; the megakernel against the graph on small), then quick_27b
# with TC_WHOLE (TC_ILP 2) and the defaults in one call, then TC_ILP=4 (ring_probe, graph only).
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_small "RING_TC=1 TC_WHOLE=1" "_tcwhole"
grep -q "verdict: ok" "$R/gpu_ops/small_tcwhole.txt" || { finish; exit 0; }
ops_small "RING_TC=1 TC_WHOLE=1 RING_BREAK=1" "_tcwhole_break"
MK_CUDA_DEFINES="RING_TC=1 TC_WHOLE=1" run_checks mega_small
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" "RING_TC=1 TC_WHOLE=1"
quick_27b "" ""
probe "RING_TC=1 TC_WHOLE=1 TC_ILP=4"
echo "== ring_probe 'RING_TC=1 TC_WHOLE=1 RING_STAMPS=300' ($(el) s)" | log
MK_CUDA_DEFINES="RING_TC=1 TC_WHOLE=1 RING_STAMPS=300" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache \
  --results "$R" 2>&1 | grep -E "ms/token|^ring |error" > "$R/ring_stamps_tcwhole.txt"
grep -E "ms/token|^ring stamps|error" "$R/ring_stamps_tcwhole.txt" | log
grep -E "^ring item" "$R/ring_stamps_tcwhole.txt" | sed -n '1,3p;20,26p' | log
finish drop-traces

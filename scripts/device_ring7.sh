#!/usr/bin/env bash
# GEMV_RING with the pair fast path (RING_PAIR=1: a warp's two fp8 pieces loaded first, no branch
# between their chunks) and 32 KB slots (RING_SLOT_KB=32: half the producer's items). Checks: the op check
# through the ring kernels on tiny (widths under 1,024: the old piece path) and on small (widths of
# 2,048 and 6,144: the pair path) against the CPU; quick_27b with 16 and with 8 consumer warps (graph
# through the ring vs the megakernel's dot_rows, per instruction). Then ring_probe (graph only, 27B, context 16): defaults; the ring at 1 and
# 2 blocks per SM, 16 and 32 KB slots; without the pair path; the mechanics alone with 32 KB slots.
# Also 16 consumer warps in one ring block (RING_CWARPS=16, one 12-slot ring, 96 registers) against two
# blocks of 8 (6 slots each), and the copy of an unnormed GEMV input by cp.async (PREP_ASYNC=1 against the loop, graph and megakernel: quick_27b).
# Two calls (each within the device tool's 600 s): `bash scripts/device_ring7.sh a` (checks, quick_27b,
# first probes), then `... b` (the other probes).
# (Before: results/ring5_8d23545, results/ring6_6e140ff.) Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
part=${1:-a}
probe() {
  echo "== ring_probe '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Gemv|error" | log
}
if [ "$part" = b ]; then
  $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
  quick_27b "" ""
  quick_27b "" "PREP_ASYNC=1"
  probe "GEMV_RING=1 PREP_ASYNC=1"
  probe "GEMV_RING=1 RING_SLOT_KB=32"
  probe "GEMV_RING=1 RING_CWARPS=16 RING_SLOT_KB=32"
  probe "GEMV_RING=1 RING_BLOCKS=2 RING_PAIR=0"
  probe "GEMV_RING=1 RING_SLOT_KB=32 RING_NOCOMPUTE=1"
  # block 0's item stamps with the pair path (compare results/ring5_8d23545/ring_stamps.txt)
  echo "== ring_probe 'GEMV_RING=1 RING_STAMPS=300' ($(el) s)" | log
  MK_CUDA_DEFINES="GEMV_RING=1 RING_STAMPS=300" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache \
    --results "$R" 2>&1 | grep -E "ms/token|^ring |error" > "$R/ring_stamps_pair.txt"
  grep -E "^ring item" "$R/ring_stamps_pair.txt" | sed -n '1,3p;20,26p' | log
  finish drop-traces
  exit 0
fi
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_tiny_with "GEMV_RING=1" "_ring" "verdict|error"
echo "== ops small 'GEMV_RING=1' ($(el) s)" | log
MK_CUDA_DEFINES="GEMV_RING=1" timeout 150 $MK gpu ops /tmp/mkcache/small-seed0 --steps 1 --cache /tmp/mkcache \
  > "$R/gpu_ops/small_ring.txt" 2>&1
grep -E "^Gemv|verdict|error" "$R/gpu_ops/small_ring.txt" | log
ops_tiny_with "GEMV_RING=1 RING_CWARPS=16" "_ring16" "verdict|error"
ops_tiny_with "PREP_ASYNC=1" "_prep_async" "verdict|error"
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" "GEMV_RING=1 RING_CWARPS=16"
quick_27b "" "GEMV_RING=1"
probe ""
probe "GEMV_RING=1 RING_BLOCKS=2"
probe "GEMV_RING=1 RING_BLOCKS=2 RING_SLOT_KB=32"
finish drop-traces

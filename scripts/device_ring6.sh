#!/usr/bin/env bash
# GEMV_RING without the producer's proxy fence per slot (RING_FENCE=0): is the fence what slows the
# consumers' shared-memory reads? (results/ring5_8d23545: consumers skipped 9.7 ms/token, the ring
# 23.0, the default 12.3.) The op check through the ring kernels without the fence, then ring_probe
# (graph only): the ring with and without the fence, without the fence and the arithmetic; quick_27b
# without the fence (graph vs megakernel bits). Run with carry ["devbin/mk.xz"], MK=/tmp/mk (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny_with "GEMV_RING=1 RING_FENCE=0" "_ring_nofence" "verdict|error"
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
probe() {
  echo "== ring_probe '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 80 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Gemv|error" | log
}
probe "GEMV_RING=1 RING_FENCE=0"
probe "GEMV_RING=1"
probe "GEMV_RING=1 RING_FENCE=0 GEMV_READ_ONLY=1"
probe "GEMV_RING=1 RING_FENCE=0 RING_BLOCKS=2 RING_SLOTS=6"
quick_27b "" "GEMV_RING=1 RING_FENCE=0"
finish drop-traces

#!/usr/bin/env bash
# GEMV_RING, fourth version: where does an item's ~3k cycles go? ring_probe (graph only, 27B, context
# 16): defaults; the ring; its mechanics alone (RING_NOCOMPUTE=1) and without the arithmetic
# (GEMV_READ_ONLY=1), wrong results by design; block 0's item stamps with and without the arithmetic
# (RING_STAMPS=300: issue, slot free, warp 0's wait over and done, warp 7's wait over and done).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
echo "== synth 27B ($(el) s)" | log
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
probe() {  # $1: NVRTC defines, $2: a file for the stamps (or empty)
  echo "== ring_probe '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 90 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" > "$R/probe.txt" 2>&1
  grep -E "ms/token|kernel Gemv|error" "$R/probe.txt" | log
  if [ -n "$2" ]; then grep -E "^ring " "$R/probe.txt" > "$R/$2"; grep -E "^ring item" "$R/$2" | sed -n '1,3p;20,26p' | log; fi
}
probe "" ""
probe "GEMV_RING=1" ""
probe "GEMV_RING=1 RING_NOCOMPUTE=1" ""
probe "GEMV_RING=1 GEMV_READ_ONLY=1" ""
probe "GEMV_RING=1 RING_STAMPS=300" ring_stamps.txt
probe "GEMV_RING=1 RING_NOCOMPUTE=1 RING_STAMPS=300" ring_stamps_nocompute.txt
finish drop-traces

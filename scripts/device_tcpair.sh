#!/usr/bin/env bash
# RING_TC with TC_PAIR (a consumer warp computes two consecutive items of a (unit, weight) at once, its
# two mma chains interleaved; the same bits): the op check through the ring on small, the megakernel
# against the graph on small (bits), then quick_27b with RING_TC=1 and with the defaults (one call: the
# ratio). Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_small "RING_TC=1" "_tc"
grep -q "verdict: ok" "$R/gpu_ops/small_tc.txt" || { finish; exit 0; }
MK_CUDA_DEFINES="RING_TC=1" run_checks mega_small
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" "RING_TC=1"
quick_27b "" ""
finish drop-traces

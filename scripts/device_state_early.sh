#!/usr/bin/env bash
# GDN_STATE_EARLY=1 and MEGA_STATE_EARLY=1 (built 2026-12-01, compiled with NVRTC 13.5 locally, NOT yet
# run): the GdnStep state loads before the wait for the predecessor, in the graph (k_gdn_step issues its
# 64-float state column's loads before griddepcontrol.wait: 128 registers, no spills) and in the
# megakernel (a block that must wait for a GdnStep unit's counter loads its state first; spills 208 / 524
# against 172 / 396 bytes). Checks first (op check on small; gpu_tiny; mega_small with both, bit for bit),
# then quick_27b with both and with the defaults in one call, and the stamped run for the in-step shares.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
ops_small "GDN_STATE_EARLY=1" "_early"
grep -q "verdict: ok" "$R/gpu_ops/small_early.txt" || { finish; exit 0; }
MK_CUDA_DEFINES="GDN_STATE_EARLY=1 MEGA_STATE_EARLY=1" run_checks gpu_tiny mega_tiny_debug mega_small
wait $synth_pid
quick_27b "" "GDN_STATE_EARLY=1 MEGA_STATE_EARLY=1"
quick_27b "" ""
stamped quick_27b "GDN_STATE_EARLY=1 MEGA_STATE_EARLY=1 GRAPH_STAMPS=1" 120 "|GdnStep"
finish drop-traces

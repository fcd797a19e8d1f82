#!/usr/bin/env bash
# GDN_STATE_EARLY=1 (built 2026-12-01, compiled with NVRTC 13.5 locally: k_gdn_step issues its 64-float
# state column's loads before griddepcontrol.wait, 128 registers, no spills; NOT yet run): checks first
# (op check on small with it; mega_small: the graph with it against the megakernel, bit for bit), then
# quick_27b with it and with the defaults in one call, and the stamped run for GdnStep's in-step share.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
ops_small "GDN_STATE_EARLY=1" "_early"
grep -q "verdict: ok" "$R/gpu_ops/small_early.txt" || { finish; exit 0; }
MK_CUDA_DEFINES="GDN_STATE_EARLY=1" run_checks gpu_tiny mega_small
wait $synth_pid
quick_27b "" "GDN_STATE_EARLY=1"
quick_27b "" ""
stamped quick_27b "GDN_STATE_EARLY=1 GRAPH_STAMPS=1" 120 "|GdnStep"
finish drop-traces

#!/usr/bin/env bash
# The fused GDN step (GdnStep: conv + recurrence + gated norm in one word; out_proj a plain GemvResidual),
# 2026-12-01. Checks first (op check on tiny and small, with the GdnStep word among the ops; gpu_tiny:
# reference vs graph; the megakernel's per-instruction identity on tiny and its negative control;
# mega_small), stopping at a failed op check; then quick_27b fused (the default) and split
# (`--gdn split`, the form before) in one call, and the fused one with GRAPH_STAMPS for the in-step rows.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
ops_tiny
grep -E "^GdnStep|verdict" "$R/gpu_ops/tiny.txt" | log
grep -q "verdict: ok" "$R/gpu_ops/tiny.txt" || { finish; exit 0; }
ops_small "" ""
grep -E "^GdnStep" "$R/gpu_ops/small.txt" | log
grep -q "verdict: ok" "$R/gpu_ops/small.txt" || { finish; exit 0; }
run_checks gpu_tiny mega_tiny_debug mega_tiny_debug_negative mega_small
wait $synth_pid
quick_27b "" ""
quick_27b "--gdn split" ""
stamped quick_27b "GRAPH_STAMPS=1" 120 "|GemvResidual|GdnStep|GemvGatedNorm"
finish drop-traces

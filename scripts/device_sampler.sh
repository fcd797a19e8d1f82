#!/usr/bin/env bash
# The sampler: `mk gpu sample` on small and the 27B (its checks: every GPU-sampled token and every
# step's kept-set size equal the CPU sampler's, the negative control; then pipelined ms/token greedy
# against sampled, medians of 3), with the defaults (TOPK_FUSED=1: the lm_head counts the logits'
# keys, k_sample_collect keeps the ids at or above the threshold) and with TOPK_FUSED=0 (the one-block
# sampler's four passes, SAMPLE_WIDE=1); TOPK_BREAK=1 (the threshold one key high) must FAIL the check.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
synth_all
mkdir -p "$R/sample"
sample() {
  echo "== sample $1 '$3' ($(el) s)" | log
  MK_CUDA_DEFINES="$3" timeout "$2" $MK gpu sample /tmp/mkcache/$1 --steps 64 --cache /tmp/mkcache > "$R/sample/$1$4.txt" 2>&1
  echo "exit $?" >> "$R/sample/$1$4.txt"
  cat "$R/sample/$1$4.txt" | log
}
ops_tiny  # the lm_head's op check (greedy: it counts nothing) and the megakernel's identity on tiny
run_checks mega_tiny_debug
sample small-seed0 200 "" _fused
sample small-seed0 200 "TOPK_FUSED=0" _passes
sample small-seed0 200 "TOPK_BREAK=1" _negative
wait $synth_pid
sample qwen3.5-27b-seed0 240 "" _fused
sample qwen3.5-27b-seed0 240 "TOPK_FUSED=0" _passes
finish

#!/usr/bin/env bash
# The sampler's cost a token (what fusing top-k into the lm_head could save at most): `mk gpu sample`
# on small and the 27B (its checks: every GPU-sampled token equals the CPU sampler's, the negative
# control; then pipelined ms/token greedy against sampled, medians of 3), with the defaults and with
# SAMPLE_WIDE=1 (four 16-byte loads per thread in flight in every pass over the logits; built
# 2026-12-01, NOT yet run). Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset small --seed 0 --out /tmp/mkcache/small-seed0 > /dev/null
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
mkdir -p "$R/sample"
sample() {
  echo "== sample $1 '$3' ($(el) s)" | log
  MK_CUDA_DEFINES="$3" timeout "$2" $MK gpu sample /tmp/mkcache/$1 --steps 64 --cache /tmp/mkcache > "$R/sample/$1$4.txt" 2>&1
  echo "exit $?" >> "$R/sample/$1$4.txt"
  cat "$R/sample/$1$4.txt" | log
}
sample small-seed0 200 "SAMPLE_WIDE=1" _wide
sample small-seed0 200 "" ""
wait $synth_pid
sample qwen3.5-27b-seed0 240 "SAMPLE_WIDE=1" _wide
sample qwen3.5-27b-seed0 240 "" ""
finish

#!/usr/bin/env bash
# L2 prefetch a few items ahead inside the GEMV streams (L2_AHEAD for the discrete fp8_stream,
# DOT_L2_AHEAD for dot_rows, the megakernel's): quick_27b at 0 (the defaults: GRAPH_PDL=1, no prefetch),
# 1, 2 and 4; then the best distance of each path (graph: L2_AHEAD by graph ms/token; megakernel:
# DOT_L2_AHEAD by megakernel ms/token) through the checks (ops, gpu_tiny, the megakernel's identity and
# negative control) and long_27b (1K, 4K, 32K). gpu_small is not rerun (it passed in results/pdl_*;
# prefetches change no value).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
for d in 0 1 2 4; do quick_27b "" "L2_AHEAD=$d DOT_L2_AHEAD=$d"; done
# The best distance per path: the lowest median among the four runs.
best() { grep -E "^== quick_27b|^  $1 " "$OUT/log.txt" | awk -v p="$1" '/^== quick_27b/{match($0,/L2_AHEAD=[0-9]+/); d=substr($0,RSTART+9,RLENGTH-9)} $1==p{v=$4+0; if(b==""||v<b){b=v;bd=d}} END{print bd}'; }
G=$(best graph); M=$(best megakernel)
echo "== chosen: L2_AHEAD=$G (graph) DOT_L2_AHEAD=$M (megakernel) ($(el) s)" | log
export MK_CUDA_DEFINES="L2_AHEAD=$G DOT_L2_AHEAD=$M"
tiny_checks
long_27b 200 "kernel "
finish

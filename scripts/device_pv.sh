#!/usr/bin/env bash
# Attention PV's partition merge by the whole block (PV_MERGE_PAR=1: the exp products in parallel, the
# sums in partition order as before: the same bits) and PV_UNROLL=8 (value rows in flight per warp, a
# variant). Checks: the op check on tiny, gpu_tiny (268 steps: two partitions, the merge), the
# megakernel per instruction against the graph on tiny. Timing: long32k_27b (27B, 32K jumped to) with
# GRAPH_STAMPS=1 (in-step rows, both paths), defaults then PV_UNROLL=8. Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny
run_checks gpu_tiny mega_tiny_debug
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
for v in "GRAPH_STAMPS=1" "GRAPH_STAMPS=1 PV_UNROLL=8"; do stamped long32k_27b "$v" 100 ".*Attn"; done
find "$R" -name 'graph_timeline.json' -delete
finish drop-traces

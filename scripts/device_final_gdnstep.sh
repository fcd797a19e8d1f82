#!/usr/bin/env bash
# Closing figures with the fused GDN step (the default since 2093390): the megakernel's negative control
# on tiny (a dropped wait must be caught by the per-instruction diff), then long_27b (27B, contexts 1K /
# 4K / 32K jumped to, graph and megakernel, medians of 32 steps) with the in-step rows.
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
run_checks mega_tiny_debug_negative
wait $synth_pid
long_27b 420 "in step|timeline"
finish drop-traces

#!/usr/bin/env bash
# The session's closing figures on the defaults: gpu_tiny (reference vs graph over 268 steps) and
# long_27b (27B, contexts 1K / 4K / 32K jumped to, graph and megakernel, medians of 32 steps).
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
run_checks gpu_tiny
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
long_27b 300 "in step|timeline"
finish drop-traces

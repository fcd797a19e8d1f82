#!/usr/bin/env bash
# MEGA_STEP_MIXED_FIRST=1: the megakernel's GdnStep computes its conv before issuing the state loads (ptxas,
# NVRTC 13.5 locally: the megakernel's spills 100 / 184 bytes against 172 / 396). mega_small with it (bits),
# then quick_27b with it and with the defaults in one call. Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset small --seed 0 --out /tmp/mkcache/small-seed0 > /dev/null
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
MK_CUDA_DEFINES="MEGA_STEP_MIXED_FIRST=1" run_checks mega_small
wait $synth_pid
quick_27b "" "MEGA_STEP_MIXED_FIRST=1"
quick_27b "" ""
finish drop-traces

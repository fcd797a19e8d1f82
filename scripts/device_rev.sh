#!/usr/bin/env bash
# Discrete GEMV launches handing out their last word's units first (GEMV_REVERSE=1: a GDN layer's bf16
# b / a units no longer the launch's tail) against the defaults; the tensor-core GEMV at one block per
# SM with 3 items in flight (no spills); then long_27b with GEMV_REVERSE=1.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
quick_27b "" ""
quick_27b "" "GEMV_REVERSE=1"
quick_27b "" "GEMV_MMA=1 MMA_AHEAD=3 GEMV_MIN_BLOCKS=1"
export MK_CUDA_DEFINES="GEMV_REVERSE=1"
long_27b 240 "kernel (GemvNorm|GemvGateUp|GemvResidual|AttnScores|AttnPv)"
finish drop-traces

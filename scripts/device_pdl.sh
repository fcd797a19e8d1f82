#!/usr/bin/env bash
# Programmatic dependent launch in the graph (GRAPH_PDL: a GEMV kernel prefetches its first unit's
# weights into L2 while its predecessor runs, PDL_PREFETCH) and the megakernel's prefetch only for a
# unit that must wait: the checks (ops, gpu_tiny, the megakernel's identity and negative control,
# gpu_small in the background), then quick_27b with the defaults, with both off, with per-line
# prefetches, and PDL without prefetch beside the megakernel at 2 blocks per SM.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 560
tiny_checks
quick_27b "" ""
quick_27b "" "GRAPH_PDL=0 MEGA_PREFETCH=0"
quick_27b "" "PREFETCH_LINES=1"
quick_27b "" "PDL_PREFETCH=0 MEGA_BLOCKS_PER_SM=2"
wait_for $bg_pid "$R/gpu_small.txt"
finish drop-traces

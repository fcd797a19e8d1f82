#!/usr/bin/env bash
# Prepared for the next device session (not yet run). quick_27b with the defaults; the weight prefetch
# before a wait capped at the unit's first k-groups of each row (PREFETCH_GROUPS 1 / 2 / 4, in both
# paths at once: PDL_PREFETCH for the graph's early-launched blocks, MEGA_PREFETCH for a megakernel
# block that must wait; the whole-unit prefetch overfilled L2 and lost); last the diagnostic
# GEMV_READ_ONLY=1 (weights loaded, arithmetic skipped: WRONG RESULTS, its diff must differ), which
# times the GEMV loop structure alone: near probe4's 85.7 % would put the limit in the arithmetic's
# latency, near today's 42-58 % in the loop structure (bytes in flight, unit joins, tails).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
quick_27b "" ""
for g in 1 2 4; do quick_27b "" "MEGA_PREFETCH=1 PDL_PREFETCH=1 PREFETCH_GROUPS=$g"; done
quick_27b "" "GEMV_READ_ONLY=1"
finish drop-traces

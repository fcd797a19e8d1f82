#!/usr/bin/env bash
# Prepared for the next device session (not yet run), about 7 minutes, after device_probe.sh:
# 1. the megakernel's norm / residual / gated-norm GEMVs one row at a time through fp8_stream
#    (MEGA_STREAM_NR1=1: pipelined loads at half MEGA_GEMV_STREAM's registers; ptxas: 88 bytes spilled
#    against 340; =2 streams gate/up too, its gate and up rows together): the per-instruction identity
#    with the graph on tiny (=2), then quick_27b with 1 and 2;
# 2. the weight prefetch before a wait capped at the unit's first k-groups of each row
#    (PREFETCH_GROUPS 1 / 2, both paths at once: PDL_PREFETCH for the graph's early-launched blocks,
#    MEGA_PREFETCH for a megakernel block that must wait; the whole-unit prefetch overfilled L2 and lost);
# 3. TICKET_FENCE=1 (the discrete GEMV's formal fences around a block's finished count): its cost, to
#    decide whether it becomes the default.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
MK_CUDA_DEFINES="MEGA_STREAM_NR1=2" run_checks mega_tiny_debug
quick_27b "" ""
quick_27b "" "MEGA_STREAM_NR1=1"
quick_27b "" "MEGA_STREAM_NR1=2"
for g in 1 2; do quick_27b "" "MEGA_PREFETCH=1 PDL_PREFETCH=1 PREFETCH_GROUPS=$g"; done
quick_27b "" "TICKET_FENCE=1"
finish drop-traces

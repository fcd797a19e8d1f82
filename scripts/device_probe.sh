#!/usr/bin/env bash
# Prepared for the next device session (not yet run), about 6 minutes (then device_probe2.sh):
# 1. the attention reworks, each the same bits by construction (ATTN_RS: the scores' warp sums by
#    reduce-scatter; ATTN_PROLOGUE: a group's query heads normed and rotated together; PV_STAGE: the
#    partitions' statistics staged in shared memory before PV's merge): the op check on tiny with and
#    without them (their AttnScores / AttnPv lines must be the same), then long32k_27b (32K, seek) with
#    the defaults and with them;
# 2. quick_27b with the defaults and with the attention reworks (at context 16 the scores word is
#    almost all prologue: 19 us a word alone, 26 us a word in the megakernel), then, last, the diagnostic GEMV_READ_ONLY=1 (weights loaded, arithmetic skipped: WRONG RESULTS, its diff
#    must differ), timing the GEMV loop structure alone: near probe4's 85.7 % would put the limit in the
#    arithmetic's latency, near today's 42-58 % in the loop structure (bytes in flight, joins, tails).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
for v in "" "ATTN_RS=1 ATTN_PROLOGUE=1 PV_STAGE=1"; do ops_tiny_with "$v" "${v:+_attn}" "AttnScores|AttnPv|verdict"; done
# gpu_tiny (contexts to 268: two partitions) with and without them: the same diff line expected.
run_checks gpu_tiny
MK_CUDA_DEFINES="ATTN_RS=1 ATTN_PROLOGUE=1 PV_STAGE=1" run_checks gpu_tiny
for v in "" "ATTN_RS=1 ATTN_PROLOGUE=1 PV_STAGE=1"; do
  echo "== long32k_27b '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 150 $MK run experiments/long32k_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Attn|results:|error" | log
done
quick_27b "" ""
quick_27b "" "ATTN_RS=1 ATTN_PROLOGUE=1 PV_STAGE=1"
quick_27b "" "GEMV_READ_ONLY=1"
finish drop-traces

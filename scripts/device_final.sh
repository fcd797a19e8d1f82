#!/usr/bin/env bash
# The session's last device call: the tiny checks with the new defaults (GEMV_REVERSE=1), quick_27b
# with them, and the megakernel streaming its GEMVs through the per-warp cp.async ring
# (MEGA_GEMV_STREAM=1 with GEMV_DEPTH 2 / 3 at 3 blocks per SM, 4 at 2; the ring also in the graph).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
tiny_checks
quick_27b "" ""
quick_27b "" "MEGA_GEMV_STREAM=1 GEMV_DEPTH=2"
quick_27b "" "MEGA_GEMV_STREAM=1 GEMV_DEPTH=3"
quick_27b "" "MEGA_GEMV_STREAM=1 GEMV_DEPTH=4 MEGA_BLOCKS_PER_SM=2"
finish drop-traces

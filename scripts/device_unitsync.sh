#!/usr/bin/env bash
# No join between a discrete GEMV block's units of one word (UNIT_SYNC=0, the default when this ran) against the
# join after every unit (UNIT_SYNC=1, as before), with the fixed and the balanced unit shapes; and
# gpu_small judged against its noise twin (the envelope), in one device call (about 9 minutes):
#   1. in the background: gpu_small (the CPU reference, its reordered twin and the graph, 264 steps);
#   2. ops (tiny), gpu_tiny, mega_tiny_debug (graph vs megakernel instruction by instruction);
#   3. quick_27b: fixed + UNIT_SYNC=1 (the old default), fixed, balanced, balanced + UNIT_SYNC=1;
#   4. long_27b (1K, 4K, 32K) with the defaults, if time is left.
# Build here, gzip the stripped binary to devbin/mk.gz, run from the repository root with
# carry ["devbin/mk.gz"] and MK=/tmp/mk after unpacking it.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 540
ops_tiny
run_checks gpu_tiny mega_tiny_debug
for v in "fixed UNIT_SYNC=1" "fixed" "balanced" "balanced UNIT_SYNC=1"; do
  read -r units defs <<< "$v"
  [ "$(el)" -gt 420 ] && { echo "== quick_27b '$v' skipped (time)" | log; continue; }
  quick_27b "--units $units" "${defs:-}"
done
[ "$(el)" -lt 330 ] && long_27b 200
wait_for $bg_pid "$R/gpu_small.txt"
find "$R" -name timeline.json -delete
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|diff:|ms/token|error|exit" "$OUT/log.txt" | tail -60

#!/usr/bin/env bash
# The balanced GEMV unit shapes (compiler UnitPolicy::Balanced) against the first ones (--units fixed),
# and the checks that the new shapes change no bits, in one device call (about 9 minutes):
#   1. in the background: gpu_small (CPU-bound: the CPU reference over 264 small steps);
#   2. ops (tiny), gpu_tiny, the megakernel's debug capture and both negative controls (word 38 now);
#   3. quick_27b balanced then fixed (graph vs megakernel bits, both timed at context 16);
#   4. long_27b (1K, 4K, 32K) with the balanced shapes;
#   5. the oracle's goldens on the small preset (its own prompt-vs-decode noise: small's envelope), and
#      the CPU reference against them (two prompts); the goldens' tensors stay there (too large).
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( for x in gpu_small; do
    timeout 500 $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" > "$R/$x.txt" 2>&1; echo "exit $?" >> "$R/$x.txt"
  done ) &
bg_pid=$!
ops_tiny
run_checks gpu_tiny mega_tiny_debug mega_tiny_debug_negative mega_tiny_negative
for u in balanced fixed; do quick_27b "--units $u" ""; done
[ "$(el)" -lt 300 ] && long_27b 220
wait_for $bg_pid "$R/gpu_small.txt"
if [ "$(el)" -lt 480 ]; then
  echo "== oracle goldens, small ($(el) s)" | log
  mkdir -p "$R/goldens_small"
  PYTHONUNBUFFERED=1 timeout $((570 - $(el))) python3 scripts/oracle_goldens.py --checkpoint /tmp/mkcache/small-seed0 \
    --out "$R/goldens_small" --lengths 50,120,250 --device cuda --git-sha "${SHA:-unknown}" 2>&1 | grep -v "falling back" > "$R/goldens_small/oracle_log.txt"
  tail -3 "$R/goldens_small/oracle_log.txt" | log
  echo "== mk golden: the CPU reference against the small goldens ($(el) s)" | log
  timeout $((590 - $(el))) $MK golden /tmp/mkcache/small-seed0 "$R/goldens_small" --max-prompts 2 > "$R/goldens_small/golden.txt" 2>&1
  tail -12 "$R/goldens_small/golden.txt" | log
  mkdir -p /tmp/goldens_small_full && mv "$R"/goldens_small/*.safetensors /tmp/goldens_small_full/ 2>/dev/null
fi
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|diff:|ms/token|error|exit" "$OUT/log.txt" | tail -60

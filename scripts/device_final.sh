#!/usr/bin/env bash
# Issue 5's record, one device call (about 5 minutes); results packed into $OUT (device_lib.sh's pack).
#   1. every op against the CPU on tiny (verdict);
#   2. 27B: megakernel vs graph bit for bit at context 64, both timed at 64 and 1K (mega_27b);
#   3. both paths at contexts 1K, 4K, 32K (long_27b, contexts jumped to);
#   4. FINAL_VARIANTS="A B" (space-separated, one define each): quick_27b per variant, if time is left.
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
echo "== ops tiny" | log
timeout 120 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee "$R/gpu_ops/tiny.txt" | tail -1 | log
for xt in mega_27b:220 long_27b:100; do
  x=${xt%:*}
  echo "== $x ($(el) s)" | log
  timeout ${xt#*:} $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | tail -32 | log
done
for v in ${FINAL_VARIANTS:-}; do
  [ "$(el)" -gt 400 ] && { echo "== variant '$v' skipped (time)" | log; continue; }
  echo "== quick_27b '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 90 $MK run experiments/quick_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "ms/token|diff:|timeline|results:" | log
done
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|identical|differ|ms/token|kernel Gemv|kernel Lm|kernel Attn|kernel Gdn|inventory|error|failed" "$OUT/log.txt" | tail -70

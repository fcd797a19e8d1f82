#!/usr/bin/env bash
# Issue 5's record, one device call (about 5 minutes); results tarred into $OUT/results.tar.gz.
#   1. every op against the CPU on tiny (verdict);
#   2. 27B: megakernel vs graph bit for bit at context 64, both timed at 64 and 1K (mega_27b);
#   3. both paths at contexts 1K, 4K, 32K (long_27b, contexts jumped to);
#   4. variants of the graph path at 1K: default and GEMV_FP8_GROUPS=4 (variant_27b), if time is left.
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
R=/tmp/mkresults
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
echo "== ops tiny" | log
timeout 120 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee "$R/gpu_ops/tiny.txt" | tail -1 | log
for xt in mega_27b:220 long_27b:100; do
  x=${xt%:*}
  echo "== $x ($(el) s)" | log
  timeout ${xt#*:} $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | tail -32 | log
done
for v in "" "GEMV_FP8_GROUPS=4"; do
  [ "$(el)" -gt 360 ] && { echo "== variant '$v' skipped (time)" | log; continue; }
  echo "== variant_27b '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 70 $MK run experiments/variant_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "ms/token|kernel Gemv|kernel LmHead|results:" | log
done
tar czf "$OUT/results.tar.gz" -C "$R" .
echo "== summary ($(el) s)"
grep -E "^== |verdict|identical|differ|ms/token|kernel Gemv|kernel Lm|kernel Attn|kernel Gdn|inventory|error|failed" "$OUT/log.txt" | tail -70

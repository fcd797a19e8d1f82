#!/usr/bin/env bash
# Issue 5/6 after the GEMV/attention/GDN rewrite, one device call (about 7 minutes):
#   1. every op against the CPU on tiny and small;
#   2. megakernel vs graph bit for bit on tiny (and the interpreter within tolerance);
#   3. 27B: megakernel vs graph bit for bit at context 64 + both timed (mega_27b), then both paths at
#      contexts 1K, 4K, 32K (long_27b, contexts jumped to);
#   4. the graph path against the CPU reference over 268 (tiny) and 264 (small) steps.
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | log
  timeout 200 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/$p.txt | log
done
for x in mega_tiny mega_27b long_27b gpu_tiny gpu_small; do
  echo "== $x ($(( $(date +%s) - t0 )) s)" | log
  timeout 240 $MK run experiments/$x.ron --cache /tmp/mkcache 2>&1 | tail -32 | log
done
tar czf "$OUT/results.tar.gz" results/gpu_ops results/mega_* results/long_* results/gpu_tiny results/gpu_small 2>/dev/null
echo "== summary ($(( $(date +%s) - t0 )) s)"
grep -E "^== |identical|differ|ms/token|kernel |inventory|error|failed" "$OUT/log.txt" | grep -v "^opcode" | tail -80

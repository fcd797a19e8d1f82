#!/usr/bin/env bash
# The GPU path after a kernel change: every op against the CPU (tiny, small), then the 27B timing.
# Run from the repository root with carry ["devbin/mk"]; results come back as one tar.
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | tee -a "$OUT/log.txt"
  timeout 200 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/$p.txt | tee -a "$OUT/log.txt"
done
echo "== gpu_27b" | tee -a "$OUT/log.txt"
timeout 300 $MK run experiments/gpu_27b.ron --cache /tmp/mkcache 2>&1 | tail -24 | tee -a "$OUT/log.txt"
tar czf "$OUT/results.tar.gz" results/gpu_* 2>/dev/null

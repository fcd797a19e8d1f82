#!/usr/bin/env bash
# GPU correctness only: every op against the CPU op (tiny, small) and the graph path against the CPU
# paths (tiny). Run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/log.txt"
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | tee -a "$OUT/log.txt"
  timeout 300 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/$p.txt | tee -a "$OUT/log.txt"
done
echo "== gpu_tiny" | tee -a "$OUT/log.txt"
timeout 300 $MK run experiments/gpu_tiny.ron --cache /tmp/mkcache 2>&1 | tail -40 | tee -a "$OUT/log.txt"
tar czf "$OUT/results.tar.gz" results/gpu_* 2>/dev/null

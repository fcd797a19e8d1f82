#!/usr/bin/env bash
# Issue 5 on the GPU machine: NVRTC compile, every op against the CPU op (tiny, small), the graph path
# against the CPU paths (tiny), and the 27B timing with its kernel breakdown. Run from the repository
# root with carry ["devbin/mk"]; the results come back as one tar.
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/log.txt"
$MK gpu compile 2>&1 | tee -a "$OUT/log.txt"
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | tee -a "$OUT/log.txt"
  timeout 300 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/$p.txt | tee -a "$OUT/log.txt"
done
for e in gpu_tiny gpu_27b; do
  echo "== $e" | tee -a "$OUT/log.txt"
  timeout 400 $MK run experiments/$e.ron --cache /tmp/mkcache 2>&1 | tail -40 | tee -a "$OUT/log.txt"
done
tar czf "$OUT/results.tar.gz" results/gpu_* 2>/dev/null
ls -la "$OUT"

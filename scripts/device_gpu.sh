#!/usr/bin/env bash
# Issue 5 on the GPU machine: NVRTC compile, the graph path against the CPU paths (tiny, small), and a
# first 27B timing. Run from the repository root with carry ["devbin/mk"]; results come back as one tar.
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$MK gpu compile 2>&1 | tee "$OUT/log.txt"
for e in gpu_tiny gpu_small gpu_27b; do
  echo "== $e" | tee -a "$OUT/log.txt"
  timeout 400 $MK run experiments/$e.ron --cache /tmp/mkcache 2>&1 | tail -30 | tee -a "$OUT/log.txt"
done
tar czf "$OUT/results.tar.gz" results/gpu_* 2>/dev/null
ls -la "$OUT"

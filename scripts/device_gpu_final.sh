#!/usr/bin/env bash
# A short GPU check after the review fixes: every op against the CPU (tiny) and the graph replay
# against both CPU paths (tiny). Run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
echo "== ops tiny" | tee -a "$OUT/log.txt"
timeout 100 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/tiny.txt | tee -a "$OUT/log.txt"
echo "== gpu_tiny" | tee -a "$OUT/log.txt"
timeout 120 $MK run experiments/gpu_tiny.ron --cache /tmp/mkcache 2>&1 | tail -30 | tee -a "$OUT/log.txt"
tar czf "$OUT/results.tar.gz" results/gpu_tiny results/gpu_ops 2>/dev/null

#!/usr/bin/env bash
# Issue 5 with the tensor-core fp8 GEMV, one device call (about 8 minutes). Results go straight to $OUT.
#   1. every op against the CPU on tiny and small (verdict), and the negative control: the same check
#      with MK_BREAK_GEMV (B's halves swapped in the mma) must FAIL;
#   2. 27B: megakernel vs graph bit for bit at context 64 and both timed (mega_27b), then both paths
#      at contexts 1K, 4K, 32K (long_27b, contexts jumped to);
#   3. the graph path against the CPU reference over 268 (tiny) and 264 (small) steps.
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
R="$OUT/results"
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | log
  timeout 200 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee "$R/gpu_ops/$p.txt" | log
done
echo "== negative control: ops tiny with MK_BREAK_GEMV (must fail)" | log
MK_CUDA_DEFINES="GEMV_MMA=1 MK_BREAK_GEMV=1" timeout 200 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache 2>&1 | tee "$R/gpu_ops/negative_control_tiny.txt" | tail -3 | log
for xt in mega_27b:240 long_27b:120 gpu_tiny:100 gpu_small:150; do
  x=${xt%:*}
  echo "== $x ($(( $(date +%s) - t0 )) s)" | log
  timeout ${xt#*:} $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | tail -32 | log
done
echo "== summary ($(( $(date +%s) - t0 )) s)"
grep -E "^== |verdict|FAILED|identical|differ|ms/token|kernel |inventory|error|failed" "$OUT/log.txt" | tail -80

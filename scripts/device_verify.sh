#!/usr/bin/env bash
# What was written but not yet run on the GPU, in one device call (about 8 minutes):
#   1. gpu_small in the background (the graph against the CPU reference over 264 small steps; CPU-bound);
#   2. `mk gpu multistep` on tiny and small: N steps per megakernel launch and the device-side stop,
#      bit for bit against the graph; the megakernel's per-instruction debug capture (mega_tiny_debug
#      must be identical instruction by instruction, mega_tiny_debug_negative must name an instruction);
#   3. the tensor-core GEMV at the new occupancy (GEMV_MMA=1, alone and with GEMV_MIN_BLOCKS=2): ops
#      verdict, then quick_27b (graph vs megakernel bits, both timed) against the default;
#   4. the 27B over 1,032 computed steps, graph vs megakernel bit for bit (if time is left).
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
( timeout 480 $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" > "$R/gpu_small.txt" 2>&1; echo "exit $?" >> "$R/gpu_small.txt" ) &
small_pid=$!
multistep_checks 6
for x in mega_tiny_debug mega_tiny_debug_negative; do
  echo "== $x: per-instruction outputs of the megakernel (prefix launches) against the graph's ($(el) s)" | log
  timeout 120 $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|NEGATIVE|results:|error" | log
done
for v in ${VERIFY_VARIANTS-"" "DEVICE_STOP=0" "GEMV_MMA=1" "GEMV_MMA=1 GEMV_MIN_BLOCKS=2"}; do
  [ "$(el)" -gt 330 ] && { echo "== variant '$v' skipped (time)" | log; continue; }
  tag=$(echo "${v:-default}" | tr ' =' '_-')
  echo "== variant '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache > "$R/gpu_ops/tiny_$tag.txt" 2>&1
  tail -1 "$R/gpu_ops/tiny_$tag.txt" | log
  grep -q "verdict: ok" "$R/gpu_ops/tiny_$tag.txt" || { echo "   op check failed: not timed" | log; continue; }
  MK_CUDA_DEFINES="$v" timeout 100 $MK run experiments/quick_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|diff:|kernel Gemv|kernel Lm|results:|error" | log
done
if [ "$(el)" -lt 330 ]; then
  sed 's/contexts: \[16\]/contexts: [1024]/; s/warmup: 1/warmup: 0/; s/repetitions: 1/repetitions: 0/' experiments/quick_27b.ron > /tmp/mega27_long.ron
  echo "== 27B over 1,032 computed steps, graph vs megakernel ($(el) s)" | log
  timeout 200 $MK run /tmp/mega27_long.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|results:|error" | log
fi
echo "== gpu_small (waiting for it, $(el) s)" | log
wait $small_pid
grep -E "diff:|status|results:|error|exit" "$R/gpu_small.txt" | log
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|tokens:|state after|stop|ms/token|diff:|error|exit" "$OUT/log.txt" | tail -60

#!/usr/bin/env bash
# The tunables written but not yet run (next session's first device call, about 7 minutes). For
# each variant: the op check on tiny (verdict) first, then quick_27b (graph vs megakernel bit for bit,
# both timed); the table at the end compares ms/token by ratio against the default in the same call.
#   UNIT_LOOP=1          a block runs several units of a GEMV word and prepares its input once
#   MEGA_BLOCKS_PER_SM=2 two megakernel blocks per SM (128 registers: the GDN column spills)
#   ATTN_UNROLL=8        more K/V loads in flight in the attention passes (timed at 32K by variant_27b)
# quick_27b also writes the megakernel's timeline (timeline.json for Perfetto, timeline.csv, .png).
# First the GPU sampler (`mk gpu sample`: bit-equal choices to the CPU's, with a negative control), the
# megakernel negative control, the pipelined decode (`Discrete::generate`, soak tiny: tokens must match the synchronised run);
# then, time permitting, gpu_small: the graph against the CPU reference over 264 small steps.
# Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
MK=${MK:-devbin/mk}
R=/tmp/mkresults
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
echo "== negative control: the megakernel without word 39's wait must DIFFER from the graph" | log
timeout 60 $MK run experiments/mega_tiny_negative.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|NEGATIVE|error" | log
echo "== GPU sampler against the CPU sampler (tiny, 5 settings x 32 steps; must be identical)" | log
timeout 90 $MK gpu sample /tmp/mkcache/tiny-seed0 --steps 32 --cache /tmp/mkcache 2>&1 | tail -8 | log
echo "== soak tiny 1000: synchronised vs pipelined (one replay in flight ahead), same tokens, no allocation" | log
timeout 60 $MK gpu soak /tmp/mkcache/tiny-seed0 --steps 1000 --cache /tmp/mkcache 2>&1 | tail -2 | log
for v in "" "UNIT_LOOP=1" "MEGA_BLOCKS_PER_SM=2" "UNIT_LOOP=1 MEGA_BLOCKS_PER_SM=2"; do
  [ "$(el)" -gt 480 ] && { echo "== variant '$v' skipped (time)" | log; continue; }
  echo "== variant '$v' ($(el) s)" | log
  tag=$(echo "${v:-default}" | tr ' =' '_-')
  MK_CUDA_DEFINES="$v" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache > "$R/gpu_ops/tiny_$tag.txt" 2>&1
  tail -1 "$R/gpu_ops/tiny_$tag.txt" | log
  grep -q "verdict: ok" "$R/gpu_ops/tiny_$tag.txt" || { echo "   op check failed: not timed" | log; continue; }
  MK_CUDA_DEFINES="$v" timeout 120 $MK run experiments/quick_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|diff:|kernel Gemv|kernel Lm|timeline|results:|error" | log
done
for v in "" "ATTN_UNROLL=8"; do
  [ "$(el)" -gt 520 ] && { echo "== long variant '$v' skipped (time)" | log; continue; }
  echo "== variant_27b at 32K '$v' ($(el) s)" | log
  sed 's/contexts: \[1024\]/contexts: [32768]/' experiments/variant_27b.ron > /tmp/variant_32k.ron
  MK_CUDA_DEFINES="$v" timeout 80 $MK run /tmp/variant_32k.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Attn|results:|error" | log
done
if [ "$(el)" -lt 450 ]; then
  echo "== gpu_small: graph vs CPU reference over 264 steps, diff pass only ($(el) s)" | log
  timeout 140 $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|status|results:|error" | log
fi
tar czf "$OUT/results.tar.gz" -C "$R" .
echo "== summary ($(el) s)"
grep -E "^== |verdict|FAILED|identical|differ|ms/token|kernel|error" "$OUT/log.txt" | tail -70

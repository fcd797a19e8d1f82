#!/usr/bin/env bash
# Issue 6's bit-identity record on all three presets, one device call (about 6 minutes), after
# device_variants.sh: tiny over 32,772 steps crossing 1K and 32K (mega_tiny_long), small over 1,032
# steps with timings (mega_small), 27B over 1,032 steps (mega_27b with contexts [64, 1024] is 80 steps;
# set MEGA27_LONG=1 to run quick_27b's variant at context 1,024 computed, about 60 s more).
# MULTISTEP=1 runs `mk gpu multistep` on tiny and small (1,100 steps, many per launch). ATTN32=1 adds attention at 32K (default against ATTN_UNROLL=8), SMALL_CHECK=1 the graph against
# the CPU reference over 264 small steps (diff only). Build here, copy target/release/mk to devbin/mk, run from the repository root with carry ["devbin/mk"].
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for xt in mega_tiny_long:200 mega_small:150; do
  x=${xt%:*}
  echo "== $x ($(el) s)" | log
  timeout ${xt#*:} $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "ms/token|diff:|timeline|results:|error" | log
done
if [ -n "${MEGA27_LONG:-}" ] && [ "$(el)" -lt 330 ]; then
  sed 's/contexts: \[16\]/contexts: [1024]/; s/warmup: 1/warmup: 0/; s/repetitions: 1/repetitions: 0/' experiments/quick_27b.ron > /tmp/mega27_long.ron
  echo "== 27B over 1,032 steps ($(el) s)" | log
  timeout 220 $MK run /tmp/mega27_long.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|results:|error" | log
fi
if [ -n "${MULTISTEP:-}" ]; then
  # The in-kernel token loop and the device-side stop against the graph, bit for bit (tiny, small).
  for pl in tiny:1100:128 small:1100:256; do
    IFS=: read -r p n k <<< "$pl"
    [ -d /tmp/mkcache/$p-seed0 ] || $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
    echo "== multistep $p: $n steps, $k per launch ($(el) s)" | log
    timeout 150 $MK gpu multistep /tmp/mkcache/$p-seed0 --steps $n --per-launch $k --cache /tmp/mkcache 2>&1 | tee "$R/multistep_$p.txt" | tail -6 | log
  done
fi
if [ -n "${ATTN32:-}" ]; then
  for v in "" "ATTN_UNROLL=8"; do
    [ "$(el)" -gt 420 ] && { echo "== 32K variant '$v' skipped (time)" | log; continue; }
    echo "== variant_27b at 32K '$v' ($(el) s)" | log
    sed 's/contexts: \[1024\]/contexts: [32768]/' experiments/variant_27b.ron > /tmp/variant_32k.ron
    MK_CUDA_DEFINES="$v" timeout 80 $MK run /tmp/variant_32k.ron --cache /tmp/mkcache --results "$R" 2>&1 \
      | grep -E "ms/token|kernel Attn|results:|error" | log
  done
fi
if [ -n "${SMALL_CHECK:-}" ] && [ "$(el)" -lt 420 ]; then
  echo "== gpu_small: graph vs CPU reference over 264 steps, diff pass only ($(el) s)" | log
  timeout 150 $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|status|results:|error" | log
fi
pack
echo "== summary ($(el) s)"
grep -E "^== |identical|differ|ms/token|error" "$OUT/log.txt" | tail -40

#!/usr/bin/env bash
# The tunables and tools written but not yet run; one device call per part (each under 10 minutes).
#   PART=a (default): the checks first (each must pass), then the GEMV variants on the 27B:
#     - `mk gpu sample`: the GPU sampler's tokens equal the CPU sampler's (5 settings), with a negative
#       control (the CPU drawing with another seed must disagree);
#     - mega_tiny_negative: the megakernel with one wait removed must DIFFER from the graph;
#     - `mk gpu soak`: pipelined decode (one replay in flight ahead) gives the synchronised tokens, and
#       nothing allocates;
#     - per variant: `mk gpu ops` tiny (verdict; for variants that change no arithmetic the op statistics must
#       equal the default's line for line), then quick_27b (graph vs megakernel bit for bit, both timed,
#       the megakernel's timeline written).
#     Variants: default, GEMV_TMA=1 (weights streamed through a shared-memory ring by bulk copies),
#     UNIT_LOOP=1 (the normed input once per block and word), GEMV_TMA=1 UNIT_LOOP=1.
#   PART=b: the sampler check again, then occupancy: the discrete GEMVs' launch bounds
#     (GEMV_MIN_BLOCKS 3, 4; 4 with GEMV_FP8_GROUPS=1) and MEGA_BLOCKS_PER_SM=2. (Part a found the
#     TMA ring slower by 47 %, so its depth is not timed; attention at 32K is in device_issue6.sh.)
# VARIANTS="A;B;.." overrides the part's variant list. Build here, copy target/release/mk to
# devbin/mk, run from the repository root with carry ["devbin/mk"]; results come back as one tar.
set -uo pipefail
PART=${PART:-a}
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_default=""
variant() {  # $1: MK_CUDA_DEFINES; ops check, then quick_27b
  local v="$1" tag
  tag=$(echo "${v:-default}" | tr ' =' '_-')
  echo "== variant '$v' ($(el) s)" | log
  MK_CUDA_DEFINES="$v" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache > "$R/gpu_ops/tiny_$tag.txt" 2>&1
  tail -1 "$R/gpu_ops/tiny_$tag.txt" | log
  grep -q "verdict: ok" "$R/gpu_ops/tiny_$tag.txt" || { echo "   op check failed: not timed" | log; return; }
  if [ -z "$v" ]; then ops_default="$R/gpu_ops/tiny_$tag.txt"; fi
  if [ -n "$ops_default" ] && [ -n "$v" ]; then
    if diff -q "$ops_default" "$R/gpu_ops/tiny_$tag.txt" > /dev/null; then
      echo "   op statistics identical to the default's (a proxy for same bits, not a bit comparison)" | log
    else
      echo "   op statistics DIFFER from the default's: not the same bits" | log
    fi
  fi
  MK_CUDA_DEFINES="$v" timeout 120 $MK run experiments/quick_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|diff:|kernel Gemv|kernel Lm|timeline|results:|error" | log
}
if [ "$PART" = b ]; then
  echo "== GPU sampler against the CPU sampler (tiny, 5 settings x 32 steps; must be identical)" | log
  timeout 90 $MK gpu sample /tmp/mkcache/tiny-seed0 --steps 32 --cache /tmp/mkcache 2>&1 | tail -8 | log
fi
if [ "$PART" = a ]; then
  echo "== GPU sampler against the CPU sampler (tiny, 5 settings x 32 steps; must be identical)" | log
  timeout 90 $MK gpu sample /tmp/mkcache/tiny-seed0 --steps 32 --cache /tmp/mkcache 2>&1 | tail -8 | log
  echo "== negative control: the megakernel without word 39's wait must DIFFER from the graph" | log
  timeout 60 $MK run experiments/mega_tiny_negative.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|NEGATIVE|error" | log
  echo "== soak tiny 1000: synchronised vs pipelined (one replay in flight ahead), same tokens, no allocation" | log
  timeout 60 $MK gpu soak /tmp/mkcache/tiny-seed0 --steps 1000 --cache /tmp/mkcache 2>&1 | tail -2 | log
  list=${VARIANTS:-";GEMV_TMA=1;UNIT_LOOP=1;GEMV_TMA=1 UNIT_LOOP=1"}
else
  list=${VARIANTS:-";GEMV_MIN_BLOCKS=3;GEMV_MIN_BLOCKS=4;GEMV_FP8_GROUPS=1 GEMV_MIN_BLOCKS=4;MEGA_BLOCKS_PER_SM=2"}
fi
IFS=';' read -r -a vs <<< "$list"
[ "${list:0:1}" = ";" ] && vs=("" "${vs[@]:1}")
for v in "${vs[@]}"; do
  [ "$(el)" -gt 470 ] && { echo "== variant '$v' skipped (time)" | log; continue; }
  variant "$v"
done
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|FAILED|identical|DIFFER|differ|ms/token|kernel|error" "$OUT/log.txt" | tail -70

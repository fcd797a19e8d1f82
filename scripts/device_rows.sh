#!/usr/bin/env bash
# M rows (1-8): `mk gpu rows` on tiny, small and the 27B: M-row verification steps (graph and
# megakernel) against one-row graph steps, bit for bit over 264 tokens from position 0 (every row's
# logits and token, the final states), the negative control (two tokens of a step swapped), then ms
# per verification step against M one-row steps. Then quick_27b (M = 1: identity and ms/token after
# the row-view change), if time is left. Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
synth_all
mkdir -p "$R/rows"
rows() {
  echo "== rows $1 --m $2 ($(el) s)" | log
  timeout "$3" $MK gpu rows /tmp/mkcache/$1 --m "$2" --tokens 264 --reps "$4" --cache /tmp/mkcache > "$R/rows/$1.txt" 2>&1
  echo "exit $?" >> "$R/rows/$1.txt"
  grep -vE "^one-row graph" "$R/rows/$1.txt" | log
}
rows tiny-seed0 2,8 300 20
rows small-seed0 2,8 120 20
wait $synth_pid
rows qwen3.5-27b-seed0 2,8 200 10
if [ "$(el)" -lt 430 ]; then quick_27b "" ""; fi
finish

#!/usr/bin/env bash
# The graph's timeline inside the captured step (GRAPH_STAMPS=1: every discrete kernel stamps its units
# in the megakernel's format) and both paths' per-opcode shares of the step ("in step" rows), 27B
# preset at context 16 and at 32K (seek); the default build's ms/token in the same call, to show what
# the stamps cost. Checks first: the op check on tiny with the stamps, the megakernel's per-instruction
# identity against the stamped graph. Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_tiny_with "GRAPH_STAMPS=1" "_stamps" "verdict|error"
echo "== mega_tiny_debug 'GRAPH_STAMPS=1' ($(el) s)" | log
MK_CUDA_DEFINES="GRAPH_STAMPS=1" timeout 120 $MK run experiments/mega_tiny_debug.ron --cache /tmp/mkcache --results "$R" 2>&1 \
  | grep -E "diff:|results:|error" | log
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" ""
stamped quick_27b "GRAPH_STAMPS=1" 150
stamped long32k_27b "GRAPH_STAMPS=1" 200
find "$R" -name 'graph_timeline.json' -exec gzip -9 {} \;
finish

#!/usr/bin/env bash
# Issue 5's and 6's correctness record on the current program (the fused GDN step, 612 words on the 27B),
# one device call: gpu_small (CPU reference vs graph over 264 small steps, in the background), the
# in-kernel token loop against the graph (mk gpu multistep, tiny and small, 1,100 steps), the megakernel
# against the graph bit for bit on tiny over 32,772 steps crossing 1K and 32K (mega_tiny_long), and on
# the 27B over 1,032 computed steps (quick_27b at context 1,024, no timing repetitions).
# Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
small_in_background 380
( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
synth_pid=$!
multistep_checks 4
echo "== mega_tiny_long ($(el) s)" | log
timeout 200 $MK run experiments/mega_tiny_long.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|results:|error" | log
wait $synth_pid
sed 's/contexts: \[16\]/contexts: [1024]/; s/warmup: 1/warmup: 0/; s/repetitions: 1/repetitions: 0/' experiments/quick_27b.ron > /tmp/mega27_long.ron
echo "== 27B over 1,032 computed steps, graph vs megakernel ($(el) s)" | log
timeout 220 $MK run /tmp/mega27_long.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|results:|error" | log
wait_for "$bg_pid" "$R/gpu_small.txt"
finish drop-traces

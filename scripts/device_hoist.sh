#!/usr/bin/env bash
# The GDN conv and recurrence with their loads hoisted (one round trip: the conv's ring slots and taps
# with its input; the recurrence's gate inputs and value with its state; its l2norm chain from
# registers), the same arithmetic in the same order. Checks: the op check on tiny and small against the
# CPU, the megakernel per instruction against the graph on tiny. Timing (27B, context 16): the defaults,
# then with GRAPH_STAMPS=1 (in-step shares per opcode, both paths) the defaults and GDN out_proj at
# 3 blocks per SM (GNR_MIN_BLOCKS=3: its 320 units in one round). Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
ops_tiny
echo "== ops small ($(el) s)" | log
timeout 150 $MK gpu ops /tmp/mkcache/small-seed0 --steps 1 --cache /tmp/mkcache > "$R/gpu_ops/small.txt" 2>&1
grep -E "^Gdn|verdict|error" "$R/gpu_ops/small.txt" | log
run_checks mega_tiny_debug
$MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1
quick_27b "" ""
for v in "GRAPH_STAMPS=1" "GRAPH_STAMPS=1 GNR_MIN_BLOCKS=3"; do stamped quick_27b "$v" 150; done
find "$R" -name 'graph_timeline.json' -delete
finish drop-traces

#!/usr/bin/env bash
# gpu_small alone (the CPU reference, its noise twin and the graph over 264 steps; the envelope), for
# the current kernels. Run from the repository root with carry ["devbin/mk.gz"] and MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset small --seed 0 --out /tmp/mkcache/small-seed0 > /dev/null
timeout ${SMALL_LIMIT:-320} $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|results:|error" | log
pack

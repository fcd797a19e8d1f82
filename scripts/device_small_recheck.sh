#!/usr/bin/env bash
# gpu_small alone (reference vs graph within the envelope of the noise twin) with the split GDN
# recurrence (RECUR_SPLIT=1), within what is left of a session's device time.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset small --seed 0 --out /tmp/mkcache/small-seed0 > /dev/null
echo "== gpu_small ($(el) s)" | log
timeout "${1:-200}" $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" > "$R/gpu_small.txt" 2>&1
echo "exit $?" >> "$R/gpu_small.txt"
grep -E "diff:|results:|error|exit" "$R/gpu_small.txt" | log
finish

#!/usr/bin/env bash
# The attention scores word with the queries packed in the lanes' read order (no bank conflicts; the
# same bits) and the PV word with 8-byte value loads over 4 position groups (another order): ops check,
# gpu_tiny, the megakernel's per-instruction identity, then long_27b (1K, 4K, 32K) against
# results/envelope_8a32f65 (about 4 minutes).
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
ops_tiny
run_checks gpu_tiny mega_tiny_debug
long_27b 220 "kernel Attn"
find "$R" -name timeline.json -delete
pack
echo "== summary ($(el) s)"
grep -E "^== |verdict|diff:|ms/token|kernel Attn|error" "$OUT/log.txt" | tail -30

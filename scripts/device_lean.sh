#!/usr/bin/env bash
# The megakernel's lean unit loop (MEGA_LEAN: a word's counter looked at until seen ready, the next
# ticket taken before the publishing fence) and the GDN recurrence on two threads per state column
# (RECUR_SPLIT; both paths): the checks on tiny (ops, gpu_tiny, the megakernel's identity and negative
# control), quick_27b with the defaults, with both off, with MEGA_NOINLINE=1, then long_27b.
# Run from the repository root with carry ["devbin/mk.xz"] and MK=/tmp/mk after unpacking it (xz -dc).
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
$MK synth --preset tiny --seed 0 --out /tmp/mkcache/tiny-seed0 > /dev/null
tiny_checks
quick_27b "" ""
quick_27b "" "MEGA_LEAN=0 RECUR_SPLIT=0"
quick_27b "" "MEGA_NOINLINE=1"
long_27b 200 "kernel "
finish

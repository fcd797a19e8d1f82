#!/usr/bin/env bash
# The session's last binary re-checked (its host refuses GPUs with less shared memory than the H200's,
# so every command below also proves the check passes here): the tiny op check and the megakernel's
# per-instruction identity and its negative control, `mk gpu sample` on small (fused top-k), quick_27b
# (graph vs megakernel bits, ms/token). Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
synth_all
ops_tiny
run_checks mega_tiny_debug mega_tiny_debug_negative
mkdir -p "$R/sample"
echo "== sample small ($(el) s)" | log
timeout 200 $MK gpu sample /tmp/mkcache/small-seed0 --steps 64 --cache /tmp/mkcache > "$R/sample/small.txt" 2>&1
echo "exit $?" >> "$R/sample/small.txt"
cat "$R/sample/small.txt" | log
wait $synth_pid
quick_27b "" ""
finish drop-traces

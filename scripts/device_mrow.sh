#!/usr/bin/env bash
# MROW_GEMV=1 (the M-row fp8 GEMV: each weight item read once for all M rows; built 2026-12-02, ptxas
# reports 2.8-3.1 KB of spills in the GEMV kernels at M = 2): `mk gpu rows` at M = 2 on small and the
# 27B, its checks (M-row graph and megakernel steps against one-row graph steps, bit for bit over 264
# tokens; the negative control) then ms per verification step, against the default (the row loop) in
# the same call. Run with carry ["devbin/mk.xz"], MK=/tmp/mk.
set -uo pipefail
source "$(dirname "$0")/device_lib.sh"
synth_all
mkdir -p "$R/rows"
rowsm() {
  echo "== rows $1 --m $2 '$3' ($(el) s)" | log
  MK_CUDA_DEFINES="$3" timeout "$5" $MK gpu rows /tmp/mkcache/$1 --m "$2" --tokens 264 --reps "$6" --cache /tmp/mkcache \
    > "$R/rows/$1$4.txt" 2>&1
  echo "exit $?" >> "$R/rows/$1$4.txt"
  grep -vE "^one-row graph" "$R/rows/$1$4.txt" | log
}
rowsm small-seed0 2 "MROW_GEMV=1" _mrow 240 10
wait $synth_pid
rowsm qwen3.5-27b-seed0 2 "MROW_GEMV=1" _mrow 240 5
rowsm small-seed0 2 "" _default 200 10
rowsm qwen3.5-27b-seed0 2 "" _default 200 5
finish

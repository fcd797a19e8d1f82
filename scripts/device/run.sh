#!/usr/bin/env bash
# The one device runner: runs experiment files and `mk gpu` checks on the GPU machine with the binary
# built here, then packs every results folder into $OUT (the device tool brings back at most 8 files of
# 16 MiB, two folders deep: results.tgz.NN parts, `cat results.tgz.* | tar xz` unpacks them).
#
#   bash scripts/device/run.sh ITEM ...
#     experiments/NAME.ron       mk run NAME.ron (its results folder under results/NAME/)
#     'gpu ops {tiny} --steps 1'  mk gpu ... with {tiny} {small} {27b} the synthetic checkpoints
#     old:ITEM                   the same with the OLD binary (A/B of two commits in one call)
#     mid:ITEM                   the same with a third binary, devbin/mk-mid.xz (A/B/C)
#     'sh:COMMAND'               a shell command ({tiny} {small} {27b} as above, $MK the binary; e.g.
#                                compute-sanitizer, or a test binary carried in devbin/)
#     sleep:N                    N seconds of nothing (lets the GPU cool between timed A/B runs)
#
# Binaries: devbin/mk.xz (carry it; built here by `cargo build --release`, stripped, xz'd), for old:
# items devbin/mk-old.xz, for mid: items devbin/mk-mid.xz. An experiment with defines: an sh: item,
# 'sh:$MK run FILE.ron --define NAME=VALUE --cache /tmp/mkcache --results /tmp/mkresults' (packed too).
# Checkpoints are synthesised once into /tmp/mkcache (the 27B's 29.6 GB only if an item needs it). Each item's output goes to $OUT/log.txt and a line per item to the summary table
# printed last. Exits non-zero if any item failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/mkcache
R=/tmp/mkresults
mkdir -p "$R"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
unpack() { xz -dc "$1" > "$2" && chmod +x "$2"; }
[ -f devbin/mk.xz ] && unpack devbin/mk.xz /tmp/mk
[ -f devbin/mk-old.xz ] && unpack devbin/mk-old.xz /tmp/mk-old
[ -f devbin/mk-mid.xz ] && unpack devbin/mk-mid.xz /tmp/mk-mid
[ -f devbin/gpu-tests.xz ] && unpack devbin/gpu-tests.xz /tmp/gpu-tests
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
synth() {  # $1: tiny | small | 27b
  local preset=$1; [ "$preset" = 27b ] && preset=qwen3.5-27b
  local dir=/tmp/mkcache/$preset-seed0
  [ -f "$dir/config.json" ] || /tmp/mk synth --preset "$preset" --seed 0 --out "$dir" > /dev/null || return 1
  echo "$dir"
}
summary=()
failed=0
for item in "$@"; do
  bin=/tmp/mk; it=$item
  case "$it" in old:*) bin=/tmp/mk-old; it=${it#old:} ;; mid:*) bin=/tmp/mk-mid; it=${it#mid:} ;; esac
  case "$it" in sleep:*) sleep "${it#sleep:}"; continue ;; esac
  [ -x "$bin" ] || { summary+=("$(printf '%-48s %5ss  %s' "${item:0:48}" 0 "FAILED: no binary $bin (devbin/$(basename $bin).xz not carried)")"); failed=1; continue; }
  start=$(el)
  echo "== $item ($start s)" | tee -a "$OUT/log.txt"
  if [[ "$it" == sh:* ]]; then
    args=${it#sh:}
    for p in tiny small 27b; do
      if [[ "$args" == *"{$p}"* ]]; then d=$(synth $p) || { rc=1; break; }; args=${args//\{$p\}/$d}; fi
    done
    out=$(MK=$bin timeout 580 bash -c "$args" 2>&1); rc=$?
    line=$(echo "$out" | grep -E "verdict|ERROR SUMMARY|test result|digest|identical|differ" | tail -3 | tr '\n' ' ' | cut -c1-220)
  elif [[ "$it" == *.ron ]]; then
    out=$(timeout 580 "$bin" run "$it" --cache /tmp/mkcache --results "$R" 2>&1); rc=$?
    line=$(echo "$out" | grep -E "ms/token|diff:" | tr '\n' ' ' | cut -c1-220)
  else
    args=$it
    for p in tiny small 27b; do
      if [[ "$args" == *"{$p}"* ]]; then d=$(synth $p) || { rc=1; break; }; args=${args//\{$p\}/$d}; fi
    done
    out=$(timeout 580 "$bin" $args --cache /tmp/mkcache 2>&1); rc=$?
    line=$(echo "$out" | grep -E "verdict|ms/token|differ|FAILED|identical" | tail -3 | tr '\n' ' ' | cut -c1-220)
  fi
  echo "$out" >> "$OUT/log.txt"
  [ $rc -ne 0 ] && { failed=1; line="FAILED (exit $rc): $(echo "$out" | grep -i error | tail -1 | cut -c1-160)"; }
  summary+=("$(printf '%-48s %5ss  %s' "${item:0:48}" $(( $(el) - start )) "$line")")
done
# Pack: traces gzipped, charts shrunk, the whole results tree in 15 MB parts.
find "$R" -name timeline.json -exec gzip -9 {} \;
find "$R" -name '*.png' -print0 | xargs -0 -r -n 4 -P 8 python3 scripts/device/pngshrink.py > /dev/null 2>&1
tar czf - -C "$R" . | split -b 15m -d - "$OUT/results.tgz."
echo "== summary ($(el) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
exit $failed

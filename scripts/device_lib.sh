# Shared by the device scripts (source it): the binary, the results folder (tarred into $OUT at the
# end: the device tool does not bring back deep folders), the log and the elapsed time.
MK=${MK:-devbin/mk}
R=/tmp/mkresults
mkdir -p "$R/gpu_ops"
log() { tee -a "$OUT/log.txt"; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# Packs $R into $OUT: timeline.json gzipped (Perfetto opens .json.gz), charts as palette PNGs, the tar split into 15 MB
# parts (the device tool brings back files of at most 16 MiB, 8 in all): cat results.tgz.* | tar xz.
pack() {
  find "$R" -name timeline.json -exec gzip -9 {} \;
  find "$R" -name '*.png' -print0 | xargs -0 -r -n 4 -P 8 python3 "$(dirname "${BASH_SOURCE[0]}")/pngshrink.py" > /dev/null
  tar czf - -C "$R" . | split -b 15m -d - "$OUT/results.tgz."
  ls -la "$OUT" | log
}
# The op check on tiny (its verdict logged), then tiny experiments by name (their diff lines logged).
ops_tiny() {
  echo "== ops tiny ($(el) s)" | log
  timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache > "$R/gpu_ops/tiny.txt" 2>&1
  tail -1 "$R/gpu_ops/tiny.txt" | log
}
# The op check on tiny with NVRTC defines $1 into gpu_ops/tiny$2.txt, the lines matching $3 logged.
ops_tiny_with() {
  echo "== ops tiny '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 90 $MK gpu ops /tmp/mkcache/tiny-seed0 --steps 1 --cache /tmp/mkcache \
    > "$R/gpu_ops/tiny$2.txt" 2>&1
  grep -E "$3" "$R/gpu_ops/tiny$2.txt" | log
}
run_checks() {
  for x in "$@"; do
    echo "== $x ($(el) s)" | log
    timeout 120 $MK run experiments/$x.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "diff:|NEGATIVE|results:|error" | log
  done
}
# quick_27b with `mk run` options $1 and NVRTC defines $2 (a variant), its figures logged.
quick_27b() {
  echo "== quick_27b $1 '$2' ($(el) s)" | log
  MK_CUDA_DEFINES="$2" timeout 120 $MK run experiments/quick_27b.ron $1 --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|diff:|kernel |launch inventory|results:|error" | log
}
# long_27b (1K, 4K, 32K, seek) within $1 seconds, its ms/token (and kernels matching $2) logged.
long_27b() {
  echo "== long_27b ($(el) s)" | log
  timeout "$1" $MK run experiments/long_27b.ron --cache /tmp/mkcache --results "$R" 2>&1 | grep -E "ms/token|${2:+$2|}results:|error" | log
}
# Waits for background job $1 and logs the diff lines of the outputs $2 ...
wait_for() {
  local pid=$1; shift
  echo "== waiting for $* ($(el) s)" | log
  wait "$pid"
  grep -E "diff:|results:|error|exit" "$@" | log
}
# Synthesises the tiny and small checkpoints, then the 27B's in the background (about 30 s): its pid
# in synth_pid (wait for it before the 27B's runs).
synth_all() {
  for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
  ( $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/mkcache/qwen3.5-27b-seed0 > /dev/null 2>&1 ) &
  synth_pid=$!
}
# Synthesises the tiny and small checkpoints, then starts gpu_small (reference, twin, graph; its
# envelope) in the background within $1 seconds; its pid in bg_pid (wait_for it, with gpu_small.txt).
small_in_background() {
  for p in tiny small; do $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null; done
  ( timeout "$1" $MK run experiments/gpu_small.ron --cache /tmp/mkcache --results "$R" > "$R/gpu_small.txt" 2>&1
    echo "exit $?" >> "$R/gpu_small.txt" ) &
  bg_pid=$!
}
# The end of a run: with "drop-traces" the Perfetto traces are left out (tree size), then pack and
# the summary lines of the log.
finish() {
  [ "${1:-}" = drop-traces ] && find "$R" -name timeline.json -delete
  pack
  echo "== summary ($(el) s)"
  grep -E "^== |verdict|diff:|ms/token|error|exit" "$OUT/log.txt" | tail -40
}
# The checks on tiny: the op check, then reference vs graph, the megakernel's per-instruction identity
# and its negative control.
tiny_checks() {
  ops_tiny
  run_checks gpu_tiny mega_tiny_debug mega_tiny_debug_negative
}
# Experiment $1 with NVRTC defines $2 (GRAPH_STAMPS=1 among them, for the in-step rows) within $3
# seconds: its ms/token, diff, in-step rows matching $4 and timeline lines logged.
stamped() {
  echo "== $1 '$2' ($(el) s)" | log
  MK_CUDA_DEFINES="$2" timeout "$3" $MK run experiments/$1.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|diff:|in step${4:-}|timeline|results:|error" | log
}
# ring_probe (27B, context 16, graph only) with NVRTC defines $1: its ms/token and GEMV rows logged.
probe() {
  echo "== ring_probe '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 70 $MK run experiments/ring_probe.ron --cache /tmp/mkcache --results "$R" 2>&1 \
    | grep -E "ms/token|kernel Gemv|error" | log
}
# `mk gpu multistep` (the in-kernel token loop and the device-side stop against the graph, bit for bit)
# on tiny (1,100 steps, 128 per launch) and small (1,100 steps, 256 per launch), the last $1 lines logged.
multistep_checks() {
  for pl in tiny:1100:128 small:1100:256; do
    IFS=: read -r p n k <<< "$pl"
    echo "== multistep $p: $n steps, $k per launch ($(el) s)" | log
    timeout 150 $MK gpu multistep /tmp/mkcache/$p-seed0 --steps $n --per-launch $k --cache /tmp/mkcache 2>&1 \
      | tee "$R/multistep_$p.txt" | tail -"$1" | log
  done
}
# The op check on small with NVRTC defines $1 into gpu_ops/small$2.txt, its GEMV rows and verdict logged.
ops_small() {
  echo "== ops small '$1' ($(el) s)" | log
  MK_CUDA_DEFINES="$1" timeout 150 $MK gpu ops /tmp/mkcache/small-seed0 --steps 1 --cache /tmp/mkcache \
    > "$R/gpu_ops/small$2.txt" 2>&1
  grep -E "^Gemv|verdict|error" "$R/gpu_ops/small$2.txt" | log
}

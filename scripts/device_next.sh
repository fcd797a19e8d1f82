#!/usr/bin/env bash
# Everything written but not yet run on the GPU, in one device call (about 6 minutes):
#   1. every op against the CPU on tiny and small (the warp-per-position attention scores are new);
#   2. the megakernel against the graph, bit for bit, and the interpreter, on tiny (mega_tiny);
#   3. 1,000 graph steps with device memory before and after (nothing allocates after startup);
#   4. the megakernel against the graph on the 27B preset, bits and time (mega_27b).
# Build here (cargo build --release), copy target/release/mk to devbin/mk, run from the repository
# root with carry ["devbin/mk"]; the results come back as one tar, the log's tail is the table.
set -uo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" results/gpu_ops
log() { tee -a "$OUT/log.txt"; }
for p in tiny small; do
  $MK synth --preset $p --seed 0 --out /tmp/mkcache/$p-seed0 > /dev/null
  echo "== ops $p" | log
  timeout 200 $MK gpu ops /tmp/mkcache/$p-seed0 --steps 2 --cache /tmp/mkcache 2>&1 | tee results/gpu_ops/$p.txt | log
done
echo "== mega_tiny" | log
timeout 150 $MK run experiments/mega_tiny.ron --cache /tmp/mkcache 2>&1 | tail -30 | log
echo "== soak tiny 1000" | log
timeout 120 $MK gpu soak /tmp/mkcache/tiny-seed0 --steps 1000 --cache /tmp/mkcache 2>&1 | tail -5 | log
if [ -z "${SKIP_27B:-}" ]; then echo "== mega_27b" | log
timeout 330 $MK run experiments/mega_27b.ron --cache /tmp/mkcache 2>&1 | tail -30 | log; fi
tar czf "$OUT/results.tar.gz" results/gpu_ops results/mega_* 2>/dev/null
echo "== summary" ; grep -E "^== |identical|differ|ms/token|alloc|error|failed" "$OUT/log.txt" | tail -40

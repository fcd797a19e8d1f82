#!/usr/bin/env bash
# Issue 2 on the GPU machine: oracle goldens for the tiny preset, and the 27B synth/check/stats timings.
# Run through the device tool from the repository root with carry: ["devbin/mk"]; writes under $OUT.
set -u
MK=${MK:-devbin/mk}
SHA=${SHA:-unknown}
mkdir -p "$OUT" /tmp/ck
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"
$MK synth --preset tiny --seed 0 --out /tmp/ck/tiny | tee "$OUT/synth_tiny.txt"
$MK check /tmp/ck/tiny | tee -a "$OUT/synth_tiny.txt"
python3 scripts/oracle_goldens.py --checkpoint /tmp/ck/tiny --out "$OUT/goldens/tiny" --device cuda --git-sha "$SHA" 2>&1 | grep -v "falling back" | tee "$OUT/oracle_tiny.txt"
{ time $MK synth --preset qwen3.5-27b --seed 0 --out /tmp/ck/27b ; } 2>&1 | tee "$OUT/synth_27b.txt"
{ time $MK check /tmp/ck/27b ; } 2>&1 | tee -a "$OUT/synth_27b.txt"
{ time $MK stats /tmp/ck/27b --tokens 4 ; } 2>&1 | tee "$OUT/stats_27b.txt"
{ time $MK synth --preset small --seed 0 --out /tmp/ck/small ; } 2>&1 | tee "$OUT/synth_small.txt"
{ time $MK check /tmp/ck/small ; } 2>&1 | tee -a "$OUT/synth_small.txt"
{ time $MK stats /tmp/ck/small --tokens 16 ; } 2>&1 | tee "$OUT/stats_small.txt"
echo "== summary"; cat "$OUT/goldens/tiny/summary.json" | head -40; tail -3 "$OUT/synth_27b.txt"; cat "$OUT/stats_27b.txt"

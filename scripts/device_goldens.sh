#!/usr/bin/env bash
# Oracle goldens for the tiny preset on the GPU machine (at most 8 files come back: 4 prompts,
# summary.json, the log). Run from the repository root with carry: ["devbin/mk"].
set -euo pipefail
MK=${MK:-devbin/mk}
mkdir -p "$OUT" /tmp/ck
$MK synth --preset tiny --seed 0 --out /tmp/ck/tiny
PYTHONUNBUFFERED=1 python3 scripts/oracle_goldens.py --checkpoint /tmp/ck/tiny --out "$OUT" --device cuda --git-sha "${SHA:-unknown}" 2>&1 | grep -v "falling back" | tee "$OUT/oracle_log.txt"
ls -la "$OUT"

#!/usr/bin/env bash
# Re-run the Nsight Compute replay on the committed GPU fixtures (their manifests hold the
# config, so the replay rebuilds the same workload) and print the counters' agreement table.
#   bash benchmarks/gpu_counters.sh OUTDIR
set -u
OUT=${1:-out}; mkdir -p "$OUT"
for r in fixtures/h200-gpt2s-b8-s128-fp32-naive fixtures/h200-gpt2s-b8-s128-bf16-sdpa; do
  python3 - "$r" <<'PY'
import sys, time
from pathlib import Path
from tracekit.collectors.replay import run_counters
t = time.time(); e = run_counters(Path(sys.argv[1]))
print(sys.argv[1], e["profiled_launches"], "launch configurations,", e["replay_seconds"], "s")
PY
  cp "$r/counters.csv" "$OUT/$(basename $r).counters.csv"; cp "$r/manifest.json" "$OUT/$(basename $r).manifest.json"
done
python3 - <<'PY'
from tracekit.parse import load; from tracekit.classify import classify
for run in ["fixtures/h200-gpt2s-b8-s128-fp32-naive", "fixtures/h200-gpt2s-b8-s128-bf16-sdpa"]:
    r = classify(load(run)); print(run); print(r.agreement().to_string()); print(*r.notes, sep="\n")
PY

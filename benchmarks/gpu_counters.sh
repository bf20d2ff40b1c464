#!/usr/bin/env bash
# Re-run the Nsight Compute replay (both passes: once per launch configuration, then every
# GEMM launch) on the committed GPU fixtures (their manifests hold the config, so the replay
# rebuilds the same workload) and print the counters' agreement table.
#   bash benchmarks/gpu_counters.sh OUTDIR
set -u
OUT=${1:-out}; mkdir -p "$OUT"
for r in fixtures/h200-gpt2s-b8-s128-fp32-naive fixtures/h200-gpt2s-b8-s128-bf16-sdpa; do
  python3 - "$r" <<'PY'
import sys
from pathlib import Path
from tracekit.collectors.replay import run_counters
e = run_counters(Path(sys.argv[1]))
g = e.get("gemm", {})
print(sys.argv[1], e["profiled_launches"], "launch configurations in", e["replay_seconds"], "s;",
      g.get("profiled_launches"), "GEMM launches in", g.get("replay_seconds"), "s; total",
      e.get("replay_seconds_total"), "s")
PY
  for f in counters.csv counters-gemm.csv manifest.json; do
    [ -f "$r/$f" ] && cp "$r/$f" "$OUT/$(basename $r).$f"
  done
done
python3 - <<'PY'
from tracekit.parse import load; from tracekit.classify import classify
for run in ["fixtures/h200-gpt2s-b8-s128-fp32-naive", "fixtures/h200-gpt2s-b8-s128-bf16-sdpa"]:
    r = classify(load(run)); print(run); print(r.agreement().to_string()); print(*r.notes, sep="\n")
PY

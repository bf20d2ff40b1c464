#!/usr/bin/env bash
# The memory wall at inference on one GPU (issue 17): generate sweeps, one call.
#   bash benchmarks/gpu_generate_sweep.sh OUTDIR
# gpt2-small and gpt2-medium, bf16, SDPA, 32 new tokens per generation, --block-size 8192:
# the batch axis 1..256 at context 1024 and the context axis 128..8192 at batch 8
# (15 configurations per model; benchmarks/gpu_generate_sweep.py has the plan).
# Per configuration: a collect subprocess (~3-5 s of start-up: torch, CUDA, the model),
# 1 warm-up + 3 timed generations and a profiler warm-up + a profiled one (the largest,
# gpt2-medium batch 256 at context 1024, ~0.5 s of prefill and ~0.3 s of decode each),
# then parse + classify of its trace (4 decode steps recorded: ~1-2 s). About 8-12 s a
# configuration, ~5 min for the 30. Each sweep has a budget (190 s and 250 s): no
# configuration starts in its last 25 s, the rows finished stay, and a second call of
# this script resumes the sweeps (done rows are not run again). Analysis and summary
# take ~20 s: the call stays under ~8 minutes.
# Prints and writes OUTDIR/summary.txt: per model the measured ceilings, the time per step
# and per token, tokens/s, the achieved bandwidth and its % of the measured copy ceiling
# (decode model's bytes and kernels' bytes), the decode GEMMs' time and % of the matmul
# roof, the measured crossover batch vs the predicted one, the KV cache and the peak
# along the context with the KV read's bandwidth and the capacity wall, the findings.
# OUTDIR/sweeps.tar.gz: the sweep folders (tables, decode.csv, fits, findings, report/,
# TensorBoard, each run's manifest) without the traces.
set -u
STEP_TAIL=4
source "$(dirname "$0")/gpu_common.sh"
PY="python3 $(dirname "$0")/gpu_generate_sweep.py"
sweep() {  # sweep NAME PRESET BUDGET_S: no configuration starts after the budget's last 25 s
  STEP_TIMEOUT=$(( $3 + 150 )) step "sweep-$1" $PY run "$2" "sweeps/$1" --budget "$3"
  STEP_TIMEOUT=60 step "analyse-$1" $PY analyse "sweeps/$1"
}
sweep gen-gpt2s gpt2-small 190
sweep gen-gpt2m gpt2-medium 250
$PY summary sweeps/gen-gpt2s sweeps/gen-gpt2m | tee "$OUT/summary.txt"
mkdir -p logs && mv "$OUT"/*.log logs/ 2>/dev/null
tar --exclude='*.pt.trace.json.gz' --exclude='*.profiler_flops.json.gz' -czf "$OUT/sweeps.tar.gz" sweeps logs
ls -la "$OUT"   # steps.txt, gpu.txt, summary.txt, sweeps.tar.gz

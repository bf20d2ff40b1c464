#!/usr/bin/env bash
# `tracekit run` on user training scripts tracekit never saw, on a CUDA machine:
# a torchvision ResNet-50 and a Hugging Face GPT-2 (and a LLaMA-style model) built from
# configs, synthetic data. Prints step times, tracekit's overhead on the timed (unprofiled)
# step, the profiler's overhead on the profiled one, the class table of each report and
# the wall time of the --counters passes; writes trimmed fixtures (<= 2 MB each).
#   bash benchmarks/gpu_run_scripts.sh OUTDIR [runs|counters|all]     (default: all)
# "runs" (~3-4 min on an H100/H200) and "counters" (Nsight Compute, several minutes)
# can be run as separate calls; "counters" reuses nothing from "runs".
set -u
OUT=${1:-out}; PART=${2:-all}; mkdir -p "$OUT" runs
export PYTHONUNBUFFERED=1
step() {  # step NAME CMD...: run with a time limit, log, report status and seconds
  local name=$1; shift
  local t0=$(date +%s%N)
  timeout 580 "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-30s rc=%-3s %7d ms\n' "$name" "$rc" "$ms" | tee -a "$OUT/steps.txt"
  tail -n 12 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, torchvision, transformers, sys; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__, 'python', sys.version.split()[0])" | tee -a "$OUT/gpu.txt"

RESNET="python benchmarks/user_scripts/resnet50_train.py"
HF="python benchmarks/user_scripts/hf_causal_lm_train.py"
# 5 warm-up + 20 timed + 3 light timeline pass + 3 profiled + 2 category + 1 snapshot = 34 steps
R="tracekit run --warmup 5 --steps 20 --profile-active 1"

if [ "$PART" = runs ] || [ "$PART" = all ]; then
  # the scripts' own step time (CUDA events at each optimizer step's end, 50 steps after 10)
  step plain-resnet50 $RESNET --iters 60 --time
  step plain-gpt2     $HF --iters 60 --time
  step plain-llama    $HF --model llama --iters 60 --time
  step run-resnet50 $R -o runs/run-resnet50-b64-bf16 -- $RESNET --iters 60
  step run-gpt2     $R -o runs/run-hf-gpt2s-b8-s128-bf16 -- $HF --iters 60
  step run-llama    $R -o runs/run-hf-llama110m-b8-s128-bf16 -- $HF --model llama --iters 60
fi
if [ "$PART" = counters ] || [ "$PART" = all ]; then
  # the whole command's wall time is in steps.txt; the two ncu passes' own in the manifest
  step counters-resnet50 $R --counters -o runs/run-resnet50-b64-bf16-counters -- $RESNET --iters 60
  step counters-gpt2     $R --counters -o runs/run-hf-gpt2s-b8-s128-bf16-counters -- $HF --iters 60
fi
for r in runs/run-*/; do
  [ -f "$r/manifest.json" ] && step "report-$(basename $r)" tracekit report "$r" --no-tensorboard
done
python3 benchmarks/run_scripts_summary.py "$OUT" | tee "$OUT/summary.txt"
mkdir -p "$OUT/fixtures"
for r in runs/run-*-counters/; do
  [ -f "$r/manifest.json" ] && python3 benchmarks/trim_fixture.py "$r" "$OUT/fixtures/$(basename ${r%-counters/})" | tail -1
done
mkdir -p logs && cp "$OUT"/*.log logs/ 2>/dev/null
tar --exclude='*.pickle' --exclude='tables' -czf "$OUT/runs.tar.gz" runs/run-* logs
tar -czf "$OUT/fixtures.tar.gz" -C "$OUT" fixtures
ls -la "$OUT"

#!/usr/bin/env bash
# Capture tracekit's GPU fixtures and end-to-end figures on a CUDA machine (one call).
#   bash benchmarks/gpu_fixtures.sh OUTDIR
# Each step runs on its own (a failure is reported and the next step still runs). Writes the
# run folders under runs/, a log per step and runs.tar.gz (run folders minus snapshot pickles).
set -u
OUT=${1:-out}; mkdir -p "$OUT" runs
export PYTHONUNBUFFERED=1
step() {  # step NAME CMD...: run with a time limit, log, report status and seconds
  local name=$1; shift
  local t0=$(date +%s%N)
  timeout 420 "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-28s rc=%-3s %6d ms\n' "$name" "$rc" "$ms" | tee -a "$OUT/steps.txt"
  tail -n 25 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])" | tee -a "$OUT/gpu.txt"
C="tracekit collect --batch 8 --seq 128 --profile-active 1 -q"
step fp32-naive    $C -o runs/gpt2s-b8-s128-fp32-naive
step bf16-sdpa     $C --dtype bf16 --attention sdpa -o runs/gpt2s-b8-s128-bf16-sdpa
step bf16-naive    $C --dtype bf16 --attention naive -o runs/gpt2s-b8-s128-bf16-naive
step bf16-sdpa-compile $C --dtype bf16 --attention sdpa --compile -o runs/gpt2s-b8-s128-bf16-sdpa-compile
step fp32-naive-stack  $C --with-stack --no-memory-snapshot -o runs/gpt2s-b8-s128-fp32-naive-stack
for r in runs/*/; do step "parse-$(basename $r)" tracekit parse "$r"; done
step overhead-fp32-naive python3 benchmarks/profiler_overhead.py
step overhead-bf16-sdpa  python3 benchmarks/profiler_overhead.py --dtype bf16 --attention sdpa
for r in runs/*/; do python3 -c "import json,sys; m=json.load(open('$r/manifest.json')); print('$r', m['status'], json.dumps(m.get('metrics')), json.dumps(m.get('ceilings')))"; done | tee "$OUT/manifests.txt"
du -sh runs/*/* | tee "$OUT/sizes.txt"
tar --exclude='*.pickle' --exclude='tables' -czf "$OUT/runs.tar.gz" runs
ls -la "$OUT"

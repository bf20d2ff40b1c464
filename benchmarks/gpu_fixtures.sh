#!/usr/bin/env bash
# Capture tracekit's GPU fixtures and end-to-end figures on a CUDA machine (one call).
#   bash benchmarks/gpu_fixtures.sh OUTDIR
# Each step runs on its own (a failure is reported and the next step still runs). Writes the
# run folders under runs/, a log per step and runs.tar.gz (run folders minus snapshot pickles).
set -u
source "$(dirname "$0")/gpu_common.sh"
C="tracekit collect --batch 8 --seq 128 --profile-active 1 -q"
ncu --query-metrics 2>&1 | grep -E "^sm__ops_path_tensor" > "$OUT/ncu_tensor_metrics.txt"
step fp32-naive    $C --counters -o runs/gpt2s-b8-s128-fp32-naive
step bf16-sdpa     $C --counters --dtype bf16 --attention sdpa -o runs/gpt2s-b8-s128-bf16-sdpa
step bf16-naive    $C --dtype bf16 --attention naive -o runs/gpt2s-b8-s128-bf16-naive
step bf16-sdpa-compile $C --dtype bf16 --attention sdpa --compile -o runs/gpt2s-b8-s128-bf16-sdpa-compile
step fp32-naive-stack  $C --with-stack --no-memory-snapshot -o runs/gpt2s-b8-s128-fp32-naive-stack
for r in runs/*/; do step "parse-$(basename $r)" tracekit parse "$r"; done
step overhead-fp32-naive python3 benchmarks/profiler_overhead.py
step overhead-bf16-sdpa  python3 benchmarks/profiler_overhead.py --dtype bf16 --attention sdpa --rounds 12
for r in runs/*/; do python3 -c "import json,sys; m=json.load(open('$r/manifest.json')); print('$r', m['status'], json.dumps(m.get('metrics')), json.dumps(m.get('ceilings')))"; done | tee "$OUT/manifests.txt"
du -sh runs/*/* | tee "$OUT/sizes.txt"
mkdir -p logs && mv "$OUT"/*.log logs/ 2>/dev/null
tar --exclude='*.pickle' --exclude='tables' -czf "$OUT/runs.tar.gz" runs logs
ls -la "$OUT"   # at most 8 files come back: steps.txt, gpu.txt, manifests.txt, sizes.txt, runs.tar.gz, ...

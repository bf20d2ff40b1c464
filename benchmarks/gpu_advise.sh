#!/usr/bin/env bash
# tracekit advise on one GPU: the two configurations of the advise issue.
#   bash benchmarks/gpu_advise.sh OUTDIR [all|s128|s1024]
# 1. s128: gpt2-small b8 s128 fp32, naive attention (GPU-bound at b8: every lever applies:
#    sdpa, bf16, compile, adamw-fused, checkpoint, cuda-graphs, batch x2, grad-accum x2).
# 2. s1024: gpt2-small b8 s1024 bf16, naive attention (memory matters: the T² attention
#    matrices; bf16 does not apply).
# Each part: the baseline collect (20 timed steps), then `tracekit advise` (10 timed steps,
# 3 warm-up per row: the baseline again, each lever alone, the best combination) — about
# 10 collects of 10-30 s each (compile rows longer: they compile in warm-up), so a part is
# about 3-4 minutes of GPU time; run the parts as two calls where a call's time is limited.
# A part whose advise folder exists resumes it (finished rows are not run again).
# OUTDIR/advise.txt gets both ranked tables (the terminal output, 100 columns),
# OUTDIR/advise-<part>.json the advise.json, OUTDIR/walls.txt each row's collect time.
# Smoke test without a GPU: COLLECT_EXTRA="--device cpu --preset tiny" ADVISE_EXTRA="--levers
# adamw-fused,cuda-graphs --steps 1 --warmup 1" bash benchmarks/gpu_advise.sh /tmp/a s128
set -u
PART=${2:-all}
STEP_TAIL=${STEP_TAIL:-60}
STEP_TIMEOUT=${STEP_TIMEOUT:-590}
export COLUMNS=100
source "$(dirname "$0")/gpu_common.sh"

advise_part() {  # advise_part NAME COLLECT-OPTIONS...: baseline, then tracekit advise
  local name=$1; shift
  local run="runs/advise-$name" res=""
  if [ ! -f "$run/manifest.json" ]; then
    step "base-$name" tracekit collect --batch 8 "$@" --steps 20 --warmup 5 \
      --profile-active 1 --no-memory-snapshot -q ${COLLECT_EXTRA:-} -o "$run"
  fi
  [ -f "$run-advise/sweep.parquet" ] && res=--resume
  step "advise-$name" tracekit advise "$run" --steps 10 --warmup 3 -q $res \
    ${ADVISE_EXTRA:-} -o "$run-advise"
  { echo "=== $name: tracekit advise $run ($(date -u +%FT%TZ))"; cat "$OUT/advise-$name.log"
    echo; } >> "$OUT/advise.txt"
  cp "$run-advise/advise.json" "$OUT/advise-$name.json" 2>/dev/null
  python3 - "$run-advise" "$name" <<'EOF' | tee -a "$OUT/walls.txt"
import sys, pandas as pd
t = pd.read_parquet(f"{sys.argv[1]}/sweep.parquet")
print(f"{sys.argv[2]}: each row's collect (wall s; the first of each dtype measures the ceilings)")
for r in t.itertuples():
    print(f"  {r.key:<48} {r.status:<6} {r.wall_s:6.1f} s  step {r.step_time_ms:8.2f} ms")
print(f"  total {t['wall_s'].sum():.0f} s for {len(t)} rows")
EOF
}

if [ "$PART" != s1024 ]; then
  advise_part s128-fp32-naive --seq 128 --dtype fp32 --attention naive
fi
if [ "$PART" != s128 ]; then
  advise_part s1024-bf16-naive --seq 1024 --dtype bf16 --attention naive
fi
echo "ranked tables: $OUT/advise.txt; collect times: $OUT/walls.txt"

#!/usr/bin/env bash
# tracekit advise on one GPU: the two configurations of the advise issue.
#   bash benchmarks/gpu_advise.sh OUTDIR [all|s128|s1024|quick]
# 1. s128: gpt2-small b8 s128 fp32, naive attention (GPU-bound at b8: every lever applies:
#    sdpa, bf16, compile, adamw-fused, checkpoint, cuda-graphs, batch x2, grad-accum x2).
# 2. s1024: gpt2-small b8 s1024 bf16, naive attention (memory matters: the T² attention
#    matrices; bf16 does not apply).
# 3. quick: s128 with the five levers that decide its recommendation (compile, sdpa,
#    adamw-fused, cuda-graphs, bf16), 5 timed steps per collect, --budget 90 --max-rounds 12
#    (about 7-8 minutes of GPU time, for a device budget of ~30 minutes in all).
# Each part: the baseline collect (20 timed steps), then `tracekit advise` with its defaults
# (10 timed steps, 3 warm-up per row: the baseline again, each lever alone, paired rounds
# of each lever against the baseline within --budget 240 s, then the measured search for the
# best configuration within --budget/2 s of wall time, builds included, then the
# recommended combination's collect): about 10 minutes a part, so run the parts as separate
# calls; a part whose advise folder exists resumes it (finished rows and finished paired
# timings are not run again), so a call cut off at its time limit is continued by the same
# command. ADVISE_TAG=2 gives a second, independent run of a part (its own baseline).
# OUTDIR/advise.txt gets the ranked tables and the search (the terminal output, 100
# columns), OUTDIR/advise-<part>.json the advise.json, OUTDIR/walls.txt each row's collect
# time.
# Smoke test without a GPU: COLLECT_EXTRA="--device cpu --preset tiny" ADVISE_EXTRA="--levers
# adamw-fused,sdpa --steps 1 --warmup 1 --budget 4" bash benchmarks/gpu_advise.sh /tmp/a s128
set -u
PART=${2:-all}
STEP_TAIL=${STEP_TAIL:-120}
STEP_TIMEOUT=${STEP_TIMEOUT:-590}
export COLUMNS=100
source "$(dirname "$0")/gpu_common.sh"

advise_part() {  # advise_part NAME COLLECT-OPTIONS...: baseline, then tracekit advise
  local name=$1${ADVISE_TAG:+-$ADVISE_TAG}; shift
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
# the issue's targets, from advise.json: the recommendation against the fastest row measured,
# and the predictions within +-15 % of the measurement
import json, math
doc = json.load(open(f"{sys.argv[1]}/advise.json"))
rows = [r for r in doc["levers"] if r["status"] == "ok" and r["step_ratio"] is not None]
c = doc["combination"] or {}
s = c.get("search") or {}
best = s.get("best_vs_baseline") or {}
rec = "+".join(s.get("best") or []) or "the baseline"
if best:
    rec += f" x{best['ratio']:.3f} [{best['lo']:.3f}-{best['hi']:.3f}, {best['rounds']} rounds]"
print(f"  recommended: {rec}; search stopped: {s.get('stopped')}; "
      f"steps: {len(s.get('steps') or [])}")
for x in s.get("interactions") or []:
    print(f"  interaction: {x}")
if rows:
    fast = min(rows, key=lambda r: r["step_ratio"])
    print(f"  fastest row measured: {fast['lever']} x{fast['step_ratio']:.3f} "
          f"[{fast['ratio_lo']:.3f}-{fast['ratio_hi']:.3f}]")
err = [r["step_error_pct"] for r in rows if r["step_error_pct"] is not None]
print(f"  predictions within +-15 %: {sum(abs(e) <= 15 for e in err)} of {len(err)}")
EOF
}

if [ "$PART" = quick ]; then
  ADVISE_EXTRA="--levers compile,sdpa,adamw-fused,cuda-graphs,bf16 --steps 5 --warmup 2 \
--budget 90 --max-rounds 12 ${ADVISE_EXTRA:-}" \
    advise_part s128-fp32-naive-quick --seq 128 --dtype fp32 --attention naive
else
  if [ "$PART" != s1024 ]; then
    advise_part s128-fp32-naive --seq 128 --dtype fp32 --attention naive
  fi
  if [ "$PART" != s128 ]; then
    advise_part s1024-bf16-naive --seq 1024 --dtype bf16 --attention naive
  fi
fi
echo "ranked tables: $OUT/advise.txt; collect times: $OUT/walls.txt"

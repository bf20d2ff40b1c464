#!/usr/bin/env bash
# The light timeline pass's cost on one GPU (issue: the timeline of the real step).
#   bash benchmarks/gpu_light_cost.sh OUTDIR [COLLECTS]
# 1. benchmarks/light_pass_cost.py: both recorders paired against unprofiled windows on
#    gpt2-small b8 s128 fp32-naive and bf16-SDPA (--rounds ${LPC_ROUNDS:-16}).
# 2. COLLECTS (default 5) default `tracekit collect --batch 8 --seq 128` runs: each states
#    its light pass's cost from its interleaved rounds (metrics.timeline_cost).
# 3. `tracekit run` on a 12-step ResNet-50 script (the fitted schedule's minimum on CUDA),
#    then `tracekit report` on its folder.
# 4. light_pass_cost.py --script on the ResNet-50 and HF GPT-2 user scripts.
# 5. (part hf, not in the default PARTS) the HF scripts alone, with more rounds: GPT-2 with
#    4 and with 8 recorded steps per window, and the LLaMA-style variant (--model llama).
# Smoke without a GPU: LPC_EXTRA="--device cpu --preset tiny --batch 2 --seq 32 --rounds 2"
#   COLLECT_EXTRA="--device cpu --preset tiny --batch 2 --seq 32" bash ... /tmp/l 1
# PARTS (default "lpc collects run12 scripts") picks the parts, in that order.
set -u
N=${2:-5}
PARTS=${PARTS:-lpc collects run12 scripts}
source "$(dirname "$0")/gpu_common.sh"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
has lpc && step lpc-gpt python3 benchmarks/light_pass_cost.py --configs fp32-naive,bf16-sdpa --pass both \
  --rounds "${LPC_ROUNDS:-16}" ${LPC_EXTRA:-}
has collects && for i in $(seq 1 "$N"); do
  step "collect-$i" tracekit collect --batch 8 --seq 128 --no-ceilings ${COLLECT_EXTRA:-} -o "runs/lc$i"
done
has collects && python3 - "$N" <<'PY' | tee "$OUT/collect_costs.txt"
import json, sys
n = int(sys.argv[1])
print("run  unprofiled  light-step  apart %   interleaved cost [IQR]   rounds (ratio per round)")
for i in range(1, n + 1):
    try:
        m = json.load(open(f"runs/lc{i}/manifest.json"))["metrics"]
    except OSError as e:
        print(f"lc{i}: {e}"); continue
    c, base, light = m.get("timeline_cost"), m["step_time_ms"]["median"], m.get("timeline_step_time_ms")
    apart = (light / base - 1) * 100 if light else float("nan")
    if c:
        rr = " ".join(f"{x:.3f}" for x in c["round_ratios"])
        print(f"lc{i}  {base:9.2f}  {light:9.2f}  {apart:+7.1f}   x{c['ratio']:.3f} [{c['iqr'][0]:.3f}-{c['iqr'][1]:.3f}]  {c['rounds']} ({rr}) {c['recorder']}")
    else:
        print(f"lc{i}  {base:9.2f}  {light}  no interleaved cost")
PY
if [ -z "${COLLECT_EXTRA:-}" ] && has run12; then
  step run12 tracekit run --no-ceilings -o runs/r12 -- python3 \
    benchmarks/user_scripts/resnet50_train.py --iters 12
  step report12 tracekit report runs/r12 -o runs/r12-report
fi
if [ -z "${COLLECT_EXTRA:-}" ] && has scripts; then
  step lpc-resnet python3 benchmarks/light_pass_cost.py --pass both --rounds "${LPC_SCRIPT_ROUNDS:-10}" \
    --script -- python3 benchmarks/user_scripts/resnet50_train.py --iters 100000
  step lpc-hf python3 benchmarks/light_pass_cost.py --pass both --rounds "${LPC_SCRIPT_ROUNDS:-10}" \
    --script -- python3 benchmarks/user_scripts/hf_causal_lm_train.py --iters 100000
fi
if [ -z "${COLLECT_EXTRA:-}" ] && has hf; then
  HF="benchmarks/user_scripts/hf_causal_lm_train.py --iters 100000"
  step hf-a4 python3 benchmarks/light_pass_cost.py --pass both --rounds 30 --active 4 --script -- python3 $HF
  step hf-a8 python3 benchmarks/light_pass_cost.py --pass both --rounds 24 --active 8 --script -- python3 $HF
  step llama-a4 python3 benchmarks/light_pass_cost.py --pass both --rounds 24 --active 4 --script -- python3 $HF --model llama
fi

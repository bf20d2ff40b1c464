#!/usr/bin/env bash
# GPU smoke of the training levers and the generate workload, plus two generate fixtures.
#   bash benchmarks/gpu_workloads.sh OUTDIR [all|levers|generate]
# (each part takes a few minutes; run them as two calls where a call's time is limited)
# 1. Levers, gpt2-small b8 s128 (10 timed steps each), each against its baseline in this run:
#    fp32 naive: baseline, --checkpoint, --optimizer adamw-fused, --grad-accum 2, --cuda-graphs;
#    bf16 SDPA: baseline, --cuda-graphs, --cuda-graphs --compile (mode=reduce-overhead).
#    Prints step time, tokens/s and peak memory per run (summary.txt).
# 2. collect --workload generate, gpt2-small and gpt2-medium, bf16 SDPA, batch 8, prompt 512,
#    64 new tokens, with --counters: TTFT, TPOT, tokens/s, the peak split, KV-cache bytes
#    (formula and measured) and the decode model's bandwidth at the measured TPOT. The
#    profiled decode steps are trimmed (--profile-active) until the gzipped trace is at most
#    2 MB: those two run folders are the fixtures (runs.tar.gz, snapshots left out).
# Each step runs on its own with a time limit (a failure is reported and the next one runs).
set -u
PART=${2:-all}
STEP_TAIL=12
source "$(dirname "$0")/gpu_common.sh"
if [ "$PART" != generate ]; then

L="tracekit collect --batch 8 --seq 128 --steps 10 --warmup 3 --profile-active 1 --no-memory-snapshot -q"
step lever-fp32-base        $L -o runs/lever-fp32-base
step lever-fp32-checkpoint  $L --no-ceilings --checkpoint -o runs/lever-fp32-checkpoint
step lever-fp32-fused       $L --no-ceilings --optimizer adamw-fused -o runs/lever-fp32-fused
step lever-fp32-accum2      $L --no-ceilings --grad-accum 2 -o runs/lever-fp32-accum2
step lever-fp32-graphs      $L --no-ceilings --cuda-graphs -o runs/lever-fp32-graphs
B="$L --dtype bf16 --attention sdpa"
step lever-bf16-base        $B -o runs/lever-bf16-base
step lever-bf16-graphs      $B --no-ceilings --cuda-graphs -o runs/lever-bf16-graphs
step lever-bf16-graphs-compile $B --no-ceilings --cuda-graphs --compile -o runs/lever-bf16-graphs-compile
fi

gen() {  # gen NAME PRESET ACTIVE: the generate run, trimmed until its trace is <= 2 MB gzipped
  local name=$1 preset=$2 active=$3
  while :; do
    step "$name-a$active" tracekit collect --workload generate --preset "$preset" --dtype bf16 \
      --attention sdpa --batch 8 --prompt 512 --new-tokens 64 --steps 10 --warmup 3 \
      --profile-active "$active" --counters -q -o "runs/$name"
    local size=$(python3 -c "import json,os; m=json.load(open('runs/$name/manifest.json')); print(os.path.getsize('runs/$name/'+m['artifacts']['trace']) if m['artifacts']['trace'] else 0)" 2>/dev/null || echo 0)
    echo "$name: --profile-active $active, trace $size bytes" | tee -a "$OUT/steps.txt"
    if [ "$size" -le 2000000 ] || [ "$active" -le 4 ]; then break; fi
    active=$(( active / 2 ))
  done
  step "report-$name" tracekit report "runs/$name" -o "$OUT/report-$name"
}
if [ "$PART" != levers ]; then
  gen gen-gpt2s-b8-p512-n64-bf16-sdpa gpt2-small 64
  gen gen-gpt2m-b8-p512-n64-bf16-sdpa gpt2-medium 32
fi

python3 - <<'EOF' | tee "$OUT/summary.txt"
import json, pathlib
from tracekit.classify.models.decode import DecodeModel
GiB = 2**30
def levers(c):
    on = [c["optimizer"], "checkpoint" if c["checkpoint"] else "", f"accum {c['grad_accum']}"
          if c["grad_accum"] > 1 else "", "cuda-graphs" if c["cuda_graphs"] else "",
          "compile" if c["compile"] else ""]
    return ", ".join(x for x in on if x)
def lever(name, base):
    p = pathlib.Path("runs") / name
    if not (p / "manifest.json").is_file():
        return print(f"{name:<26} no manifest")
    m = json.loads((p / "manifest.json").read_text())
    met = m.get("metrics")
    if m["status"] != "ok" or not met:
        return print(f"{name:<26} {m['status']}: {m['error']}")
    st, peak = met["step_time_ms"], met["peak_allocated_bytes"]
    bp = pathlib.Path("runs") / base / "manifest.json"
    b = (json.loads(bp.read_text()).get("metrics") or {}) if bp.is_file() else {}
    rel = f"x{met['tokens_per_s'] / b['tokens_per_s']:.2f} tok/s" if b else ""  # accum: 2x tokens/step
    relm = f"{100 * (peak / b['peak_allocated_bytes'] - 1):+.0f} % peak" if b else ""
    print(f"{name:<26} step {st['median']:7.2f} ms (p10 {st['p10']:.2f}, p90 {st['p90']:.2f})  "
          f"{met['tokens_per_s']:>9,.0f} tok/s  peak {peak / GiB:5.2f} GiB  {rel:>12} {relm:>10}  "
          f"[{levers(m['config'])}]")
print("levers (gpt2-small b8 s128; ratios against the baseline of the same dtype, this run):")
for n in ("base", "checkpoint", "fused", "accum2", "graphs"):
    lever(f"lever-fp32-{n}", "lever-fp32-base")
for n in ("base", "graphs", "graphs-compile"):
    lever(f"lever-bf16-{n}", "lever-bf16-base")
print("\ngenerate (bf16 SDPA, batch 8, prompt 512, 64 decode steps):")
for name in ("gen-gpt2s-b8-p512-n64-bf16-sdpa", "gen-gpt2m-b8-p512-n64-bf16-sdpa"):
    p = pathlib.Path("runs") / name
    m = json.loads((p / "manifest.json").read_text()) if (p / "manifest.json").is_file() else None
    if not m or m["status"] != "ok":
        print(f"{name}: {m and m['status']} {m and m['error']}")
        continue
    met, g, c = m["metrics"], m["generate"], m["ceilings"]
    ft, tp, mem = met["ttft_ms"], met["tpot_ms"], met["memory"]
    dm = DecodeModel.from_manifest(m)
    bw, peak = c["memory_bandwidth_Bps"], c["matmul_flops"]["bf16"]
    pred = dm.predict(bw, peak)
    achieved = dm.mean_bytes_per_step() / (tp["median"] / 1e3)
    print(f"{name}: TTFT {ft['median']:.2f} ms (p10 {ft['p10']:.2f}, p90 {ft['p90']:.2f}); "
          f"TPOT {tp['median']:.3f} ms (p10 {tp['p10']:.3f}, p90 {tp['p90']:.3f}); "
          f"{met['tokens_per_s']:,.0f} tok/s decoding, {met['generated_tokens_per_s']:,.0f} end to end")
    print(f"  TPOT first/last decode step {met['tpot_ms_by_step'][0]:.3f} / {met['tpot_ms_by_step'][-1]:.3f} ms; "
          f"profiled decode step {met['profiled_step_time_ms']:.3f} ms; recorded steps {m['profiler']['decode_steps_recorded']}")
    print(f"  peak {met['peak_allocated_bytes'] / GiB:.3f} GiB = weights {mem['weights_bytes'] / GiB:.3f} + KV "
          f"{mem['kv_cache_bytes'] / GiB:.3f} (formula {g['kv_cache_bytes'] / GiB:.3f}) + other {mem['other_bytes'] / GiB:.3f}")
    print(f"  decode model: {dm.mean_bytes_per_step() / 1e6:.1f} MB/step -> {achieved / 1e9:.0f} GB/s at the "
          f"measured TPOT = {100 * achieved / bw:.0f} % of the copy ceiling {bw / 1e12:.2f} TB/s; "
          f"roofline TPOT {1e3 * pred['tpot_s']:.3f} ms; GEMM ridge batch {pred['gemm_ridge_batch']:.0f} "
          f"(bf16 {peak / 1e12:.0f} TFLOP/s); whole-step ridge batch {pred['step_ridge_batch']}")
    cnt = m.get("counters")
    print(f"  counters: {cnt and cnt['profiled_launches']} launch configurations, "
          f"trace {(p / m['artifacts']['trace']).stat().st_size / 1e6:.2f} MB")
EOF
du -sh runs/*/* | tee "$OUT/sizes.txt"
mkdir -p logs && mv "$OUT"/*.log logs/ 2>/dev/null
tar --exclude='*.pickle' --exclude='tables' --exclude='tensorboard' -czf "$OUT/runs.tar.gz" runs/gen-* logs
ls -la "$OUT"   # steps.txt, gpu.txt, summary.txt, sizes.txt, runs.tar.gz

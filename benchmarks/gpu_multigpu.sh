#!/usr/bin/env bash
# Multi-GPU runs and figures on a machine with (at least) 2 GPUs, one call, default options:
#   bash benchmarks/gpu_multigpu.sh OUTDIR
# Captures `tracekit collect --batch 8 --seq 128` (every default: light timeline pass, full
# pass, category step, ceilings, the measured communication cost) on one GPU (fp32) and on 2
# GPUs as DDP fp32, DDP bf16-SDPA and FSDP2 bf16-SDPA; prints each run's ranks (status,
# unprofiled step, light / full passes), the measured communication cost per rank (steps with
# and without gradient sync, unprofiled: comm_cost.txt), the interconnect sweep, checks every
# rank's trace for distributedInfo, reports every run rank by rank (ranks.txt) and the 1 -> 2
# GPU scaling, and packs the run folders without memory-snapshot pickles into
# OUTDIR/runs.tar.gz. Everything goes under OUTDIR (runs/, logs/, *.txt).
# Each step runs on its own with a time limit: a failure is reported (steps.txt: rc) and the
# next step still runs. About 4-6 minutes on 2 x H100 (each collect 30-60 s).
set -u
OUT=${1:-out}
RUNS="$OUT/runs" LOGS="$OUT/logs"
mkdir -p "$RUNS" "$LOGS"
export PYTHONUNBUFFERED=1
# NVLink multicast stays off: NVLS / symmetric-memory multicast objects are a host-wide
# NVSwitch resource, and on a shared host their use can take its GPUs out of service. tracekit
# sets these for its ranks unless they are set; exported here so every process sees them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step() {  # step NAME LIMIT_S CMD...: run with a time limit, log, report status and seconds
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-22s rc=%-3s %6d ms\n' "$name" "$rc" "$ms" | tee -a "$OUT/steps.txt"
  tail -n 25 "$LOGS/$name.log"
}
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), 'python', sys.version.split()[0])"
  git rev-parse HEAD 2>/dev/null
} 2>&1 | tee "$OUT/gpu.txt"

C="tracekit collect --batch 8 --seq 128 -q"
step g1-fp32            240 $C -o "$RUNS/g1-fp32"
step ddp-fp32           300 $C --gpus 2 -o "$RUNS/ddp-fp32"
step ddp-bf16-sdpa      300 $C --gpus 2 --dtype bf16 --attention sdpa -o "$RUNS/ddp-bf16-sdpa"
step fsdp-bf16-sdpa     300 $C --gpus 2 --parallel fsdp --dtype bf16 --attention sdpa -o "$RUNS/fsdp-bf16-sdpa"

# Per run and rank: status, unprofiled step, the passes, the measured communication cost.
RUNS="$RUNS" python3 - <<'EOF' 2>&1 | tee "$OUT/comm_cost.txt"
import json, os
runs = os.environ["RUNS"]
for name in ("g1-fp32", "ddp-fp32", "ddp-bf16-sdpa", "fsdp-bf16-sdpa"):
    path = os.path.join(runs, name, "manifest.json")
    if not os.path.exists(path):
        print(f"\n== {name}: no manifest"); continue
    try:
        m = json.load(open(path))
        met = m.get("metrics") or {}
        print(f"\n== {name}: status {m['status']} {m.get('error') or ''}")
        st = (met.get("step_time_ms") or {}).get("median")
        print(f"  unprofiled step (slowest rank) {st} ms; light pass step "
              f"{met.get('timeline_step_time_ms')} ms; profiled step {met.get('profiled_step_time_ms')} ms")
        d = m.get("distributed")
        if not d:
            print(f"  timeline trace: {m['artifacts'].get('timeline_trace')}"); continue
        for r in d["ranks"]:
            rm, a = r.get("metrics") or {}, r.get("artifacts") or {}
            print(f"  rank {r['rank']} {r['status']:<10} unprofiled step "
                  f"{(rm.get('step_time_ms') or {}).get('median')} ms, light pass "
                  f"{rm.get('timeline_step_time_ms')} ms, full pass {rm.get('profiled_step_time_ms')} ms; "
                  f"timeline trace {a.get('timeline_trace')} ({a.get('timeline_trace_absent')}); "
                  f"{r.get('error') or ''}")
        c = d.get("comm_cost") or {}
        print(f"  comm_cost: status {c.get('status')} {c.get('reason') or ''}; {c.get('rounds')} rounds x "
              f"{c.get('steps_per_round')} steps; sync off: {c.get('sync_off')}; caveat: {c.get('caveat')}")
        print(f"  {'rank':>4} {'with ms':>9} {'without':>9} {'cost ms':>8} {'range ms':>18} {'cost %':>7}")
        for x in c.get("ranks") or []:
            lo, hi = x["cost_ms_range"]
            print(f"  {x['rank']:>4} {x['with_sync_ms']:>9.2f} {x['without_sync_ms']:>9.2f} {x['cost_ms']:>8.2f} "
                  f"{f'[{lo:.2f}, {hi:.2f}]':>18} {x['cost_pct'] or 0:>7.1f}")
            print(f"       rounds with {[round(v, 2) for v in x['rounds_with_ms']]}")
            print(f"       rounds without {[round(v, 2) for v in x['rounds_without_ms']]}")
    except Exception as e:  # a broken manifest must not hide the other runs
        print(f"  unreadable: {type(e).__name__}: {e}")
EOF

RUNS="$RUNS" python3 - <<'EOF' 2>&1 | tee "$OUT/multigpu.txt"
import glob, gzip, json, os
for run in sorted(glob.glob(os.path.join(os.environ["RUNS"], "*"))):
    p = os.path.join(run, "manifest.json")
    if not os.path.exists(p) or "distributed" not in json.load(open(p)):
        continue
    try:
        m = json.load(open(p))
        print(f"\n== {run}: status {m['status']} {m['error'] or ''}")
        for key in ("traces", "timeline_traces"):
            for name in m["artifacts"].get(key) or []:
                doc = json.loads(gzip.decompress(open(os.path.join(run, name), "rb").read()))
                info = doc.get("distributedInfo")
                nccl = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())
                print(f"  {name}: distributedInfo {info and {k: info.get(k) for k in ('rank', 'world_size', 'backend', 'nccl_version')}}, {nccl} NCCL kernels")
        ic = (m.get("ceilings") or {}).get("interconnect")
        if not ic:
            continue
        print(f"  interconnect ({ic['world_size']} ranks, {ic['backend']}): all-reduce busbw peak "
              f"{ic['busbw_Bps'] / 1e9:.1f} GB/s at {ic['peak_at_bytes'] / 2**20:g} MiB")
        print(f"  {'bytes':>12} " + " ".join(f"{c + ' us':>18} {'busbw GB/s':>10}" for c in ic["collectives"]))
        for row in zip(*(ic["collectives"][c]["sizes"] for c in ic["collectives"])):
            print(f"  {row[0]['bytes']:>12} " + " ".join(f"{s['time_us']:>18.1f} {s['busbw_Bps'] / 1e9:>10.2f}" for s in row))
    except Exception as e:
        print(f"  unreadable: {type(e).__name__}: {e}")
EOF

# The multi-rank report of every run (docs/multi-gpu.md) and the 1 -> 2 GPU scaling.
for name in ddp-fp32 ddp-bf16-sdpa fsdp-bf16-sdpa; do
  [ -f "$RUNS/$name/manifest.json" ] && step "report-$name" 240 tracekit report "$RUNS/$name" --no-tensorboard
done
step compare-g1-ddp-fp32 240 tracekit compare "$RUNS/g1-fp32" "$RUNS/ddp-fp32" -o "$RUNS/compare-g1-ddp-fp32"

RUNS="$RUNS" python3 - <<'EOF' 2>&1 | tee "$OUT/ranks.txt"
import json, os
runs = os.environ["RUNS"]
for name in ("ddp-fp32", "ddp-bf16-sdpa", "fsdp-bf16-sdpa"):
    p = os.path.join(runs, name, "report", "summary.json")
    if not os.path.exists(p):
        print(f"\n== {name}: no report"); continue
    try:
        s = json.load(open(p))
        r = s.get("ranks") or {}
        print(f"\n== {name}: verdict {(s.get('step_summary') or {}).get('verdict')}")
        print("  ranks:", json.dumps({k: v for k, v in r.items() if not isinstance(v, (list, dict))}))
        for x in r.get("per_rank") or []:
            print("  ", json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in x.items()
                                    if not isinstance(v, (list, dict))}))
        for k in ("comm_cost", "measured", "reconcile"):
            if k in r:
                print(f"  {k}:", json.dumps(r[k])[:2000])
    except Exception as e:
        print(f"  unreadable: {type(e).__name__}: {e}")
p = os.path.join(runs, "compare-g1-ddp-fp32", "compare.json")
if os.path.exists(p):
    print("\n== scaling", json.dumps(json.load(open(p)).get("scaling"), indent=1)[:4000])
EOF
du -sh --exclude='*.pickle' "$RUNS"/* | tee "$OUT/sizes.txt"
tar --exclude='*.pickle' --exclude='tables' --exclude='report' --exclude='report.ranks' \
  -czf "$OUT/runs.tar.gz" -C "$OUT" runs logs
ls -la "$OUT"   # steps.txt, gpu.txt, comm_cost.txt, multigpu.txt, ranks.txt, sizes.txt, runs.tar.gz

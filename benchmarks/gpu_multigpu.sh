#!/usr/bin/env bash
# Multi-GPU fixtures and figures on a machine with (at least) 2 GPUs, one call:
#   bash benchmarks/gpu_multigpu.sh OUTDIR
# Captures `tracekit collect --gpus 2 --batch 8 --seq 128` as DDP fp32, DDP bf16 and FSDP2
# bf16 (plus the one-GPU fp32 run they scale from), prints each run's ranks and its
# interconnect sweep (all-reduce / all-gather / reduce-scatter busbw by message size), checks
# every rank's trace for distributedInfo, reports every run rank by rank (ranks.txt: per rank,
# per collective, exposed communication, busbw against the measured ceiling, and the 1 -> 2
# GPU scaling), and packs the run folders without memory-snapshot
# pickles into OUTDIR/runs.tar.gz (each folder should stay <= 2 MB: sizes.txt says).
# Each step runs on its own: a failure is reported and the next step still runs.
set -u
OUT=${1:-out}; mkdir -p "$OUT" runs
export PYTHONUNBUFFERED=1
# NVLink multicast stays off: NVLS / symmetric-memory multicast objects are a host-wide
# NVSwitch resource, and on a shared host their use can take its GPUs out of service. tracekit
# sets these for its ranks unless they are set; exported here so every process sees them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step() {  # step NAME CMD...: run with a time limit, log, report status and seconds
  local name=$1; shift
  local t0=$(date +%s%N)
  timeout 540 "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-16s rc=%-3s %6d ms\n' "$name" "$rc" "$ms" | tee -a "$OUT/steps.txt"
  tail -n 20 "$OUT/$name.log"
}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
nvidia-smi topo -m | tee -a "$OUT/gpu.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), 'python', sys.version.split()[0])" | tee -a "$OUT/gpu.txt"

C="tracekit collect --batch 8 --seq 128 --profile-active 1 -q"
step g1-fp32   $C -o runs/h200-gpt2s-b8-s128-fp32-naive-g1
step ddp-fp32  $C --gpus 2 -o runs/h200x2-gpt2s-b8-s128-fp32-naive-ddp
step ddp-bf16  $C --gpus 2 --dtype bf16 --attention sdpa -o runs/h200x2-gpt2s-b8-s128-bf16-sdpa-ddp
step fsdp-bf16 $C --gpus 2 --parallel fsdp --dtype bf16 --attention sdpa -o runs/h200x2-gpt2s-b8-s128-bf16-sdpa-fsdp

python3 - <<'EOF' | tee "$OUT/multigpu.txt"
import glob, gzip, json, os
for run in sorted(glob.glob("runs/h200x2-*")):
    m = json.load(open(os.path.join(run, "manifest.json")))
    d, met = m["distributed"], m.get("metrics") or {}
    print(f"\n== {run}: status {m['status']} {m['error'] or ''}")
    for r in d["ranks"]:
        rm = r.get("metrics") or {}
        st = (rm.get("step_time_ms") or {}).get("median")
        pk = rm.get("peak_allocated_bytes")
        print(f"  rank {r['rank']} {r['status']:<10} step {st if st is None else round(st, 2)} ms, "
              f"peak {pk and round(pk / 2**30, 2)} GiB, {r['device'] and r['device']['name']}")
    if met:
        print(f"  slowest rank {met['slowest_rank']}, skew {met['step_time_skew_pct']:.1f} %, "
              f"{met['tokens_per_s']:,.0f} tokens/s ({met['tokens_per_s_per_gpu']:,.0f} per GPU)")
    for name in m["artifacts"]["traces"]:
        doc = json.loads(gzip.decompress(open(os.path.join(run, name), "rb").read()))
        info = doc.get("distributedInfo")
        nccl = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())
        print(f"  {name}: distributedInfo {info and {k: info.get(k) for k in ('rank', 'world_size', 'backend', 'nccl_version')}}, {nccl} NCCL kernels")
    ic = (m.get("ceilings") or {}).get("interconnect")
    if not ic:
        continue
    print(f"  interconnect ({ic['world_size']} ranks, {ic['backend']}): all-reduce busbw peak "
          f"{ic['busbw_Bps'] / 1e9:.1f} GB/s at {ic['peak_at_bytes'] / 2**20:g} MiB; factors {ic['bus_factor']}")
    print(f"  {'bytes':>12} " + " ".join(f"{c + ' us':>18} {'busbw GB/s':>10}" for c in ic["collectives"]))
    rows = zip(*(ic["collectives"][c]["sizes"] for c in ic["collectives"]))
    for row in rows:
        print(f"  {row[0]['bytes']:>12} " + " ".join(f"{s['time_us']:>18.1f} {s['busbw_Bps'] / 1e9:>10.2f}" for s in row))
EOF
# The multi-rank report of every run (docs/multi-gpu.md): per rank, per collective, exposed
# communication, busbw against the measured ceiling; and the 1 -> 2 GPU scaling.
for run in runs/h200x2-*; do
  name=$(basename "$run")
  step "report-${name#h200x2-gpt2s-b8-s128-}" tracekit report "$run" --no-tensorboard
done
step compare-g1-ddp tracekit compare runs/h200-gpt2s-b8-s128-fp32-naive-g1 \
  runs/h200x2-gpt2s-b8-s128-fp32-naive-ddp -o runs/compare-g1-ddp-fp32
python3 - <<'EOF' | tee "$OUT/ranks.txt"
import glob, json, os
for run in sorted(glob.glob("runs/h200x2-*")):
    p = os.path.join(run, "report", "summary.json")
    if not os.path.exists(p):
        print(f"\n== {run}: no report"); continue
    s = json.load(open(p)); r = s["ranks"]
    print(f"\n== {run}: verdict {s['step_summary']['verdict']}; exposed communication "
          f"{r['exposed_comm_pct']:.1f} % of the step; skew {r['skew_pct']:.1f} %; "
          f"waited on rank {r['waited_on_rank']}; clock: {r['clock']['reason']}")
    for x in r["per_rank"]:
        print(f"  rank {x['rank']}: step {x['step_time_ms']:.2f} ms, busy {x['gpu_busy_ms']:.2f}, "
              f"compute {x['compute_ms']:.2f}, comm {x['comm_kernel_ms']:.2f} (summed "
              f"{x['comm_kernel_sum_ms']:.2f}), exposed {x['exposed_comm_ms']:.2f}, idle "
              f"{x['gpu_idle_ms']:.2f}, sync wait {x['sync_wait_ms']:.2f} ms")
    c = r["collectives"]
    print(f"  collectives: {c['matched']} matched ({c['complete']} complete, {c['consistent']} "
          f"consistent), {c['per_step']:.1f} per step; ceiling {r['ceiling'] and r['ceiling']['source']}")
    for k, v in c["by_kind"].items():
        print(f"  {k}: busbw {v['busbw_Bps'] / 1e9:.1f} GB/s (best {v['best_busbw_Bps'] / 1e9:.1f}) = "
              f"{v['busbw_pct_of_ceiling'] or 0:.1f} % of the {v['ceiling_source']} ceiling "
              f"{(v['ceiling_Bps'] or 0) / 1e9:.1f} GB/s")
    for t in c["table"][:8]:
        print(f"    {t['kind']:<15} {t['message_bytes'] or 0:>12.0f} B {t['dtype']} x{t['per_step']:.1f}/step "
              f"{t['dur_mean_ms']:.3f} ms, transfer {t['transfer_mean_ms']:.3f}, wait {t['wait_pct']:.0f} %, "
              f"busbw {(t['busbw_Bps'] or 0) / 1e9:.1f} GB/s")
p = "runs/compare-g1-ddp-fp32/compare.json"
if os.path.exists(p):
    print("\n== scaling", json.dumps(json.load(open(p)).get("scaling"), indent=1))
EOF
du -sh --exclude='*.pickle' runs/* | tee "$OUT/sizes.txt"
mkdir -p logs && mv "$OUT"/*.log logs/ 2>/dev/null
tar --exclude='*.pickle' --exclude='tables' --exclude='report' --exclude='report.ranks' \
  -czf "$OUT/runs.tar.gz" runs logs
ls -la "$OUT"   # steps.txt, gpu.txt, multigpu.txt, ranks.txt, sizes.txt, runs.tar.gz

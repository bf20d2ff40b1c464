"""The generate sweeps of benchmarks/gpu_generate_sweep.sh (issue 17's figures on a GPU).

    python3 benchmarks/gpu_generate_sweep.py run PRESET DIR [--budget S]  # resumes DIR
    python3 benchmarks/gpu_generate_sweep.py analyse DIR          # fits, findings, HTML, TB
    python3 benchmarks/gpu_generate_sweep.py summary DIR [DIR...] # the figures, as text

One sweep per preset, bf16 SDPA, ``NEW_TOKENS`` decode steps per generation, the block
size raised to the longest context: the batch axis (``BATCHES``) at context 1024 and the
context axis (``CONTEXTS``) at batch 8. Per configuration ``WARMUP`` + ``STEPS``
unprofiled generations, then the profiled one (a profiler warm-up generation first,
``PROFILED`` decode steps recorded); no Python stacks (the generate report needs no
memory timeline, and stacks slow the profiled generation).

The summary: per sweep the measured ceilings, the batch axis (time per step and per token,
tokens/s, the decode model's bandwidth and its % of the copy ceiling, the kernels', the
decode GEMMs' time and % of the matmul roof, the roofline time), the measured crossover
against the predicted one, the context axis (KV cache, peak, the KV read's bandwidth),
the capacity wall, and the findings.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192)
NEW_TOKENS = 32
STEPS, WARMUP, PROFILED = 3, 1, 4
TIMEOUT_S = 120.0  # one configuration
NEXT_S = 25.0  # what the slowest configuration takes: no new one starts with less left


def plan(preset: str) -> object:
    from tracekit.sweep import SweepPlan

    return SweepPlan(
        workload="generate",
        preset=preset,
        batches=BATCHES,
        seqs=CONTEXTS,
        dtypes=("bf16",),
        attentions=("sdpa",),
        base_batch=8,
        base_seq=1024,
        new_tokens=NEW_TOKENS,
        block_size=max(CONTEXTS),
        steps=STEPS,
        warmup=WARMUP,
        profile_wait=0,
        profile_warmup=1,
        profile_active=PROFILED,
        timeout_s=TIMEOUT_S,
        with_stack=False,
    )


class _OutOfTime(Exception):
    pass


def run(preset: str, out: Path, budget_s: float) -> None:
    """The sweep into ``out`` (resumed when it holds one), stopping after the row that
    leaves less than ``NEXT_S`` of ``budget_s``: the rows done stay, a second call goes on
    (a ``timeout`` around this would leave its collect subprocess running)."""
    from tracekit.sweep import run_sweep
    from tracekit.sweep.runner import TABLE

    t0 = time.monotonic()

    def on_row(r: dict[str, object]) -> None:
        print(f"{r['key']}: {r['status']} ({float(r['wall_s']):.1f} s)", flush=True)  # type: ignore[arg-type]
        if time.monotonic() - t0 > budget_s - NEXT_S:
            raise _OutOfTime

    try:
        run_sweep(plan(preset), out, resume=(out / TABLE).is_file(), quiet=True, on_row=on_row)  # type: ignore[arg-type]
    except _OutOfTime:
        print(f"stopped after {time.monotonic() - t0:.0f} s of {budget_s:.0f}: run again to go on")


def analyse(out: Path) -> None:
    from tracekit.reports.sweep import write_html, write_tensorboard
    from tracekit.sweep import describe, finish, read_table

    table = read_table(out)
    outs = finish(table, out)
    outs.html = write_html(table, out / "report")
    write_tensorboard(table, out / "tensorboard")
    outs.tensorboard = out / "tensorboard"
    print(describe(table, outs))


def _f(v: object, fmt: str, scale: float = 1.0) -> str:
    """``v / scale`` formatted, or a dash as wide as the format's width."""
    width = int(fmt.split(".")[0].rstrip(",") or 0)
    try:
        x = float(v) / scale  # type: ignore[arg-type]
    except (TypeError, ValueError):
        x = math.nan
    return format(x, fmt) if math.isfinite(x) else "-".rjust(width)


def _batch_lines(ok: pd.DataFrame) -> list[str]:
    lines = [
        f"  {'batch':>5} {'step ms':>8} {'ms/token':>9} {'tokens/s':>9} {'model GB/s':>10} "
        f"{'% copy':>6} {'kern %':>6} {'GEMM ms':>8} {'GEMM %':>6} {'roof ms':>8} {'peak GiB':>8}"
    ]
    for _, r in ok.iterrows():
        lines.append(
            f"  {int(r['batch']):>5} {_f(r['tpot_ms'], '8.3f')} "
            f"{_f(r['time_per_token_ms'], '9.4f')} {_f(r['tokens_per_s'], '9,.0f')} "
            f"{_f(r['decode_model_bw_Bps'], '10.0f', 1e9)} {_f(r['decode_bw_util_pct'], '6.1f')} "
            f"{_f(r['decode_kernel_bw_util_pct'], '6.1f')} {_f(r['decode_gemm_ms'], '8.3f')} "
            f"{_f(r['decode_gemm_flops_util_pct'], '6.1f')} {_f(r['model_tpot_ms'], '8.3f')} "
            f"{_f(r['peak_bytes'], '8.2f', 2**30)}"
        )
    return lines


def _context_lines(g: pd.DataFrame) -> list[str]:
    lines = [
        f"  {'context':>7} {'status':<6} {'step ms':>8} {'model GB/s':>10} {'% copy':>6} "
        f"{'KV GiB':>7} {'peak GiB':>8}"
    ]
    for _, r in g.iterrows():
        lines.append(
            f"  {int(r['seq']):>7} {r['status']:<6} {_f(r['tpot_ms'], '8.3f')} "
            f"{_f(r['decode_model_bw_Bps'], '10.0f', 1e9)} {_f(r['decode_bw_util_pct'], '6.1f')} "
            f"{_f(r['kv_cache_bytes'], '7.3f', 2**30)} {_f(r['peak_bytes'], '8.2f', 2**30)}"
        )
    return lines


def summary(out: Path) -> str:
    """The figures of one generate sweep folder, as text."""
    from tracekit.sweep import read_table
    from tracekit.sweep.decode import generate_findings, walls_table
    from tracekit.sweep.rows import complete

    t = complete(read_table(out))
    ok = t[t["status"] == "ok"]
    if not len(ok):
        return f"{out}: no configuration ran ({', '.join(t['status'].astype(str))})"
    first = ok.iloc[0]
    head = (
        f"{out.name}: {first.get('device_name')}, {len(ok)} of {len(t)} configurations ok; "
        f"copy ceiling {_f(first['bandwidth_roof_Bps'], '.2f', 1e12)} TB/s, bf16 matmul "
        f"{_f(first['matmul_roof_flops'], '.0f', 1e12)} TFLOP/s (measured), ridge "
        f"{_f(first['matmul_roof_flops'] / first['bandwidth_roof_Bps'], '.0f')} FLOP/B"
    )
    lines = [head, "batch axis (context 1024, time per step = TPOT, unprofiled):"]
    lines += _batch_lines(ok[ok["seq"] == 1024].sort_values("batch"))
    walls = walls_table(t)
    for _, w in walls.iterrows():
        if w["axis"] == "batch":
            pred = _f(w.get("crossover_predicted"), ".0f")
            lines.append(
                f"  crossover ({w['line']}): measured batch "
                f"{_f(w.get('crossover_batch'), '.0f')} (by {w.get('crossover_column')}, between "
                f"{w.get('crossover_between')}), predicted {pred}; capacity wall batch ≈ "
                f"{_f(w.get('capacity_wall'), ',.0f')}"
            )
    lines.append("context axis (batch 8):")
    lines += _context_lines(t[t["batch"] == 8].sort_values("seq"))
    for _, w in walls.iterrows():
        if w["axis"] == "seq":
            oom = w.get("capacity_oom_at")
            wall = (f"OOM at context {int(oom)}" if pd.notna(oom) else
                    f"context ≈ {_f(w.get('capacity_wall'), ',.0f')} (extrapolated)")  # fmt: skip
            lines.append(
                f"  KV read {_f(w.get('kv_read_bw_Bps'), '.2f', 1e12)} TB/s; capacity wall: {wall}"
            )
    lines.append("findings:")
    lines += [f"  {s}" for s in generate_findings(t)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("preset")
    r.add_argument("out", type=Path)
    r.add_argument("--budget", type=float, default=600.0, help="seconds for this sweep")
    a = sub.add_parser("analyse")
    a.add_argument("out", type=Path)
    s = sub.add_parser("summary")
    s.add_argument("outs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args.preset, args.out, args.budget)
    elif args.cmd == "analyse":
        analyse(args.out)
    else:
        print("\n\n".join(summary(o) for o in args.outs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

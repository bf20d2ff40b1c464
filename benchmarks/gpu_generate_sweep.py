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

The summary: per sweep the measured ceilings and how many planned configurations ran, the
batch axis (time per step, its p10–p90, the GPU's busy time per step, what limits the step
— launch/host-bound or GPU-bound, tracekit.sweep.decode_limits —, the decode model's
bandwidth over the step and over the GPU's busy time as % of the copy ceiling, time per
token, tokens/s, the kernels' bandwidth, the decode GEMMs' time and % of the matmul roof,
the roofline time, the peak), the measured crossover against the predicted one, the
context axis (the same step columns, KV cache, peak, the KV read's bandwidth), the
capacity walls, and the findings.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192)
NEW_TOKENS = 32
STEPS, WARMUP, PROFILED = 3, 1, 4
TIMEOUT_S = 120.0  # one configuration
NEXT_S = 25.0  # the least time left in which a new configuration starts


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
    """The sweep into ``out`` (resumed when it holds one), stopping after a row when the
    next one might not fit in ``budget_s``: when less than twice the row's own time (at
    least ``NEXT_S``) is left — along the batch each configuration takes up to about twice
    the one before. The rows done stay, a second call goes on (a ``timeout`` around this
    would leave its collect subprocess running)."""
    from tracekit.sweep import run_sweep
    from tracekit.sweep.runner import TABLE

    t0 = time.monotonic()

    def on_row(r: dict[str, object]) -> None:
        took = float(r["wall_s"])  # type: ignore[arg-type]
        print(f"{r['key']}: {r['status']} ({took:.1f} s)", flush=True)
        if time.monotonic() - t0 > budget_s - max(NEXT_S, 2 * took):
            raise _OutOfTime

    try:
        run_sweep(plan(preset), out, resume=(out / TABLE).is_file(), quiet=True, on_row=on_row)  # type: ignore[arg-type]
    except _OutOfTime:
        print(f"stopped after {time.monotonic() - t0:.0f} s of {budget_s:.0f}: run again to go on")


def analyse(out: Path) -> None:
    from tracekit.commands.sweep import report_sweep
    from tracekit.sweep import describe, read_table

    table = read_table(out)
    print(describe(table, report_sweep(table, out)))


def _f(v: object, fmt: str, scale: float = 1.0) -> str:
    """``v / scale`` formatted, or a dash as wide as the format's width."""
    width = int(fmt.split(".")[0].rstrip(",") or 0)
    try:
        x = float(v) / scale  # type: ignore[arg-type]
    except (TypeError, ValueError):
        x = math.nan
    return format(x, fmt) if math.isfinite(x) else "-".rjust(width)


def _spread(r: pd.Series) -> str:
    """p10–p90 of the time per step, ms."""
    lo, hi = _f(r.get("tpot_p10_ms"), ".2f"), _f(r.get("tpot_p90_ms"), ".2f")
    return f"{lo}–{hi}".rjust(11) if "-" not in (lo, hi) else "-".rjust(11)


# the step's columns both axes show: time and its spread, the GPU's busy time, what limits
# the step, the decode model's bandwidth over the step and over the GPU's busy time
STEP_HEAD = (
    f"{'step ms':>8} {'p10–p90 ms':>11} {'GPU ms':>7} {'idle %':>6} {'limit':>5} "
    f"{'GB/s step':>9} {'% copy step':>11} {'% copy busy':>11}"
)


def _step_cells(r: pd.Series) -> str:
    from tracekit.sweep.decode_limits import short_limit

    return (
        f"{_f(r['tpot_ms'], '8.3f')} {_spread(r)} {_f(r['decode_gpu_busy_ms'], '7.3f')} "
        f"{_f(r['decode_host_idle_pct'], '6.0f')} {short_limit(r['decode_limit']):>5} "
        f"{_f(r['decode_model_bw_Bps'], '9.0f', 1e9)} {_f(r['decode_bw_util_pct'], '11.1f')} "
        f"{_f(r['decode_busy_bw_util_pct'], '11.1f')}"
    )


def _batch_lines(ok: pd.DataFrame) -> list[str]:
    lines = [
        f"  {'batch':>5} {STEP_HEAD} {'ms/token':>9} {'tokens/s':>9} {'kern %':>6} "
        f"{'GEMM ms':>8} {'GEMM %':>6} {'roof ms':>8} {'peak GiB':>8}"
    ]
    for _, r in ok.iterrows():
        lines.append(
            f"  {int(r['batch']):>5} {_step_cells(r)} {_f(r['time_per_token_ms'], '9.4f')} "
            f"{_f(r['tokens_per_s'], '9,.0f')} {_f(r['decode_kernel_bw_util_pct'], '6.1f')} "
            f"{_f(r['decode_gemm_ms'], '8.3f')} {_f(r['decode_gemm_flops_util_pct'], '6.1f')} "
            f"{_f(r['model_tpot_ms'], '8.3f')} {_f(r['peak_bytes'], '8.2f', 2**30)}"
        )
    return lines


def _context_lines(g: pd.DataFrame) -> list[str]:
    lines = [f"  {'context':>7} {'status':<6} {STEP_HEAD} {'KV GiB':>7} {'peak GiB':>8}"]
    for _, r in g.iterrows():
        lines.append(
            f"  {int(r['seq']):>7} {r['status']:<6} {_step_cells(r)} "
            f"{_f(r['kv_cache_bytes'], '7.3f', 2**30)} {_f(r['peak_bytes'], '8.2f', 2**30)}"
        )
    return lines


def _planned(out: Path) -> int | None:
    """How many configurations the sweep's plan (sweep.json) holds."""
    try:
        return len(json.loads((out / "sweep.json").read_text())["points"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _walls(t: pd.DataFrame, lines: list[str], axis: str) -> None:
    """The crossover (batch) or the KV read (context) and the capacity wall of each line."""
    from tracekit.sweep.decode import (
        capacity_wall,
        crossover_words,
        kv_read_bandwidth,
        line_groups,
        line_name,
        measured_crossover,
    )

    for fixed, g in line_groups(t, axis):
        ok = g[g["status"] == "ok"]
        w = capacity_wall(g, axis)
        name = "context" if axis == "seq" else "batch"
        if w is None:
            wall = "-"
        elif w.oom_at is not None:
            wall = f"OOM at {name} {w.oom_at}"
        else:
            wall = f"{name} ≈ {_f(w.wall, ',.0f')} (extrapolated)"
        if axis == "batch":
            c = measured_crossover(ok) if len(ok) >= 2 else None
            words = crossover_words(c, ok) if c is not None else "no crossover: < 2 rows"
            lines.append(f"  {line_name(fixed)}: {words}")
            lines.append(f"  capacity wall: {wall}")
        else:
            kv = kv_read_bandwidth(ok) if len(ok) else None
            read = (
                f"KV read {kv[0] / 1e12:.2f} TB/s (slope of {kv[3]} along the context, "
                f"R² {kv[2]:.3f})"
                if kv
                else "KV read -"
            )
            lines.append(f"  {read}; capacity wall: {wall}")


def summary(out: Path) -> str:
    """The figures of one generate sweep folder, as text."""
    from tracekit.sweep import read_table
    from tracekit.sweep.decode import generate_findings, prepared

    t = prepared(read_table(out))
    ok = t[t["status"] == "ok"]
    if not len(ok):
        return f"{out}: no configuration ran ({', '.join(t['status'].astype(str))})"
    first = ok.iloc[0]
    planned = _planned(out) or len(t)
    head = (
        f"{out.name}: {first.get('device_name')}, {len(t)} of {planned} planned "
        f"configurations ran, {len(ok)} ok; copy ceiling "
        f"{_f(first['bandwidth_roof_Bps'], '.2f', 1e12)} TB/s, bf16 matmul "
        f"{_f(first['matmul_roof_flops'], '.0f', 1e12)} TFLOP/s (measured), ridge "
        f"{_f(first['matmul_roof_flops'] / first['bandwidth_roof_Bps'], '.0f')} FLOP/B"
    )
    lines = [
        head,
        "batch axis (context 1024; step = time per output token, unprofiled; GPU = the "
        "decode steps' GPU busy time in the trace; idle = 1 - GPU/step; limit: host when "
        "idle >= 20 %; % copy = the decode model's bytes over the step / over the GPU time):",
    ]
    lines += _batch_lines(ok[ok["seq"] == 1024].sort_values("batch"))
    _walls(t, lines, "batch")
    lines.append("context axis (batch 8):")
    lines += _context_lines(t[t["batch"] == 8].sort_values("seq"))
    _walls(t, lines, "seq")
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

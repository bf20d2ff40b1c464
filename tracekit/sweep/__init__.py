"""``tracekit sweep``: how memory and speed scale with batch, sequence length, precision and
attention. Runs ``tracekit collect`` per configuration (subprocesses), then reads the run
folders into one table, fits scaling laws, compares with the analytic memory model and
writes findings. No torch import here: the collectors run in the subprocesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.io import atomic_write_bytes, atomic_write_text
from tracekit.summary.memory_model import estimate, kv_cache_bytes
from tracekit.sweep.decode import (
    generate_findings,
    generate_fits,
    generating,
    prepared,
    walls_table,
)
from tracekit.sweep.decode_limits import short_limit
from tracekit.sweep.findings import findings
from tracekit.sweep.fit import fit_table, largest_fitting, power_fit, quadratic_fit
from tracekit.sweep.plan import Point, SweepPlan
from tracekit.sweep.rows import complete
from tracekit.sweep.runner import read_table, run_sweep

__all__ = [
    "DECODE_CSV",
    "Point",
    "SweepOutputs",
    "SweepPlan",
    "describe",
    "estimate",
    "findings",
    "finish",
    "fit_table",
    "generate_findings",
    "generate_fits",
    "kv_cache_bytes",
    "largest_fitting",
    "power_fit",
    "quadratic_fit",
    "read_table",
    "run_sweep",
]


DECODE_CSV = "decode.csv"  # a generate sweep's crossovers and capacity walls


@dataclass
class SweepOutputs:
    fits: pd.DataFrame
    findings: list[str]
    html: Path | None
    tensorboard: Path | None


def finish(table: pd.DataFrame, out_dir: Path) -> SweepOutputs:
    """Fits and findings of a sweep folder (written as fits.csv and findings.txt). The
    HTML section and TensorBoard scalars are the reports stage's
    (``tracekit.reports.sweep``): the CLI adds them."""
    out_dir = Path(out_dir)
    table = complete(table)
    if generating(table):  # decode: crossover along batch, capacity wall along context
        fits = generate_fits(table)
        found = generate_findings(table)
        walls = walls_table(table)
        atomic_write_bytes(out_dir / DECODE_CSV, walls.to_csv(index=False).encode())
    else:
        fits = fit_table(table)
        found = findings(table, fits)
    atomic_write_bytes(out_dir / "fits.csv", fits.to_csv(index=False).encode())
    atomic_write_text(out_dir / "findings.txt", "\n".join(found) + "\n")
    return SweepOutputs(fits, found, None, None)


def _gib(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 2**30:.2f}"


def _table_lines(table: pd.DataFrame, header: str, row: Callable[[pd.Series], str]) -> list[str]:
    """``header``, then ``row(r)`` for each ok row and the error of each other row."""
    lines = [f"{'configuration':<22} {'status':<6} {header}"]
    for _, r in table.iterrows():
        what = row(r) if r["status"] == "ok" else r["error"]
        lines.append(f"{r['key']:<22} {r['status']:<6} {what}")
    return lines


def _train_row(r: pd.Series) -> str:
    return (
        f"{r['step_time_ms']:>8.2f} {r['tokens_per_s']:>10,.0f} {_gib(r['peak_bytes']):>8} "
        f"{_gib(r.get('model_peak_bytes')):>9} {r.get('model_error_pct', math.nan):>+6.1f} "
        f"{_gib(r.get('mem_activations_bytes')):>7} "
        f"{_gib(r.get('model_activations_bytes')):>9} {r.get('gpu_idle_pct', math.nan):>6.1f}"
    )


def _generate_row(r: pd.Series) -> str:
    """Prefill and decode times, memory, and the decode step's bandwidth by the analytic
    model's byte count (% of the measured copy ceiling)."""
    return (
        f"{r.get('ttft_ms', math.nan):>8.2f} {r.get('tpot_ms', math.nan):>8.3f} "
        f"{r.get('time_per_token_ms', math.nan):>8.4f} "
        f"{r['tokens_per_s']:>10,.0f} {_gib(r['peak_bytes']):>8} "
        f"{_gib(r.get('kv_cache_bytes')):>7} "
        f"{r.get('model_decode_bytes_per_step', math.nan) / 1e6:>13.1f} "
        f"{r.get('decode_model_bw_Bps', math.nan) / 1e9:>7.1f} "
        f"{r.get('decode_bw_util_pct', math.nan):>6.1f} "
        f"{r.get('decode_gemm_ms', math.nan):>8.3f} "
        f"{r.get('decode_gpu_busy_ms', math.nan):>7.3f} "
        f"{r.get('decode_host_idle_pct', math.nan):>6.0f} "
        f"{short_limit(r.get('decode_limit')):>5}"
    )


def describe(table: pd.DataFrame, outs: SweepOutputs) -> str:
    """What the CLI prints: the table, the model next to the measurement, fits, findings."""
    if "workload" in table.columns and (table["workload"] == "generate").all():
        header = (
            f"{'TTFT ms':>8} {'TPOT ms':>8} {'ms/tok':>8} {'tokens/s':>10} {'peak GiB':>8} "
            f"{'KV GiB':>7} {'model MB/step':>13} {'GB/s':>7} {'% copy':>6} {'GEMM ms':>8} "
            f"{'GPU ms':>7} {'idle %':>6} {'limit':>5}"
        )
        return _describe(_table_lines(prepared(table), header, _generate_row), outs)
    header = (
        f"{'step ms':>8} {'tokens/s':>10} {'peak GiB':>8} {'model GiB':>9} {'err %':>6} "
        f"{'act GiB':>7} {'model act':>9} {'idle %':>6}"
    )
    return _describe(_table_lines(table, header, _train_row), outs)


def _describe(lines: list[str], outs: SweepOutputs) -> str:
    """The table's lines, then the fits and the findings."""
    fits = outs.fits
    if len(fits):
        lines.append("")
        lines.append("scaling fits (log-log exponent, R²; seq: quadratic T² share at the max):")
        power = fits[fits["fit"] != "linear"] if "fit" in fits else fits
        for _, f in power[
            power["quantity"].isin(["peak_bytes", "dynamic_peak_bytes", "tokens_per_s"])
        ].iterrows():
            extra = ""
            if not pd.isna(f["quad_c"]):
                extra = f"  quad R² {f['quad_r2']:.3f}"
            if not pd.isna(f["t2_share_at_max"]):  # a share only where the T² term is a part
                extra += f", T² share {100 * f['t2_share_at_max']:.0f} %"
            lines.append(
                f"  {f['quantity']:<19} vs {f['axis']:<5} [{f['line']}]: "
                f"{f['exponent']:+.2f} (R² {f['r2']:.3f}){extra}"
            )
    lines.append("")
    lines.append("findings:")
    lines += [f"  {s}" for s in outs.findings]
    if outs.html is not None:
        lines.append("")
        lines.append(f"report: {outs.html}   tensorboard: {outs.tensorboard}")
    return "\n".join(lines)

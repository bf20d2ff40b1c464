"""``tracekit sweep``: how memory and speed scale with batch, sequence length, precision and
attention. Runs ``tracekit collect`` per configuration (subprocesses), then reads the run
folders into one table, fits scaling laws, compares with the analytic memory model and
writes findings. No torch import here: the collectors run in the subprocesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.classify.models.memory import estimate, kv_cache_bytes
from tracekit.io import atomic_write_bytes, atomic_write_text
from tracekit.sweep.analysis import SweepAnalysis, analyse_sweep, memory_unit
from tracekit.sweep.decode import generate_findings, generate_fits, prepared
from tracekit.sweep.decode_limits import short_limit
from tracekit.sweep.findings import findings
from tracekit.sweep.fit import fit_table, largest_fitting, power_fit, quadratic_fit
from tracekit.sweep.plan import Point, SweepPlan
from tracekit.sweep.runner import read_table, run_sweep

__all__ = [
    "DECODE_CSV",
    "Point",
    "SweepAnalysis",
    "SweepOutputs",
    "SweepPlan",
    "analyse_sweep",
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
    analysis: SweepAnalysis
    html: Path | None
    tensorboard: Path | None

    @property
    def fits(self) -> pd.DataFrame:
        return self.analysis.fits

    @property
    def findings(self) -> list[str]:
        return self.analysis.findings


def finish(table: pd.DataFrame, out_dir: Path) -> SweepOutputs:
    """The sweep's analysis (:func:`tracekit.sweep.analysis.analyse_sweep`), its fits and
    findings written as fits.csv and findings.txt (a generate sweep's crossovers and walls
    as decode.csv). The HTML section and TensorBoard scalars are the reports stage's
    (``tracekit.reports.sweep``), drawn from ``analysis``: ``tracekit.commands.sweep`` adds
    them."""
    out_dir = Path(out_dir)
    sw = analyse_sweep(table)
    if sw.generate:  # decode: crossover along batch, capacity wall along context
        atomic_write_bytes(out_dir / DECODE_CSV, sw.walls.to_csv(index=False).encode())
    atomic_write_bytes(out_dir / "fits.csv", sw.fits.to_csv(index=False).encode())
    atomic_write_text(out_dir / "findings.txt", "\n".join(sw.findings) + "\n")
    return SweepOutputs(sw, None, None)


def _table_lines(table: pd.DataFrame, header: str, row: Callable[[pd.Series], str]) -> list[str]:
    """``header``, then ``row(r)`` for each ok row and the error of each other row."""
    lines = [f"{'configuration':<22} {'status':<6} {header}"]
    for _, r in table.iterrows():
        what = row(r) if r["status"] == "ok" else r["error"]
        lines.append(f"{r['key']:<22} {r['status']:<6} {what}")
    return lines


# the training table's columns: (column, title, width, format; "mem": bytes in the
# table's memory unit, whose name replaces "{u}")
TRAIN_COLUMNS = (
    ("step_time_ms", "step ms", 8, ".2f"),
    ("tokens_per_s", "tokens/s", 10, ",.0f"),
    ("peak_bytes", "peak {u}", 8, "mem"),
    ("model_peak_bytes", "model {u}", 9, "mem"),
    ("model_error_pct", "err %", 6, "+.1f"),
    ("mem_activations_bytes", "act {u}", 7, "mem"),
    ("model_activations_bytes", "model act {u}", 13, "mem"),
    ("gpu_idle_pct", "idle %", 6, ".1f"),
)


def _measured(table: pd.DataFrame) -> list[tuple[str, str, int, str]]:
    """The training columns some ok row has a value in: one not measured (a CPU sweep's
    GPU idle) is absent, not NaN."""
    ok = table[table["status"] == "ok"]
    return [c for c in TRAIN_COLUMNS if c[0] in ok and ok[c[0]].notna().any()]


# a generate sweep's columns, every one shown (a figure a run lacks, the GPU's on CPU: -)
GENERATE_COLUMNS: tuple[tuple[str, str, int, str], ...] = (
    ("ttft_ms", "TTFT ms", 8, ".2f"),
    ("tpot_ms", "TPOT ms", 8, ".3f"),
    ("time_per_token_ms", "ms/tok", 8, ".4f"),
    ("tokens_per_s", "tokens/s", 10, ",.0f"),
    ("peak_bytes", "peak {u}", 8, "mem"),
    ("kv_cache_bytes", "KV {u}", 7, "mem"),
    ("model_decode_bytes_per_step", "model MB/step", 13, "M.1f"),
    ("decode_model_bw_Bps", "GB/s", 7, "G.1f"),
    ("decode_bw_util_pct", "% copy", 6, ".1f"),
    ("decode_gemm_ms", "GEMM ms", 8, ".3f"),
    ("decode_gpu_busy_ms", "GPU ms", 7, ".3f"),
    ("decode_host_idle_pct", "idle %", 6, ".0f"),
    ("decode_limit", "limit", 5, "limit"),
)
_SCALES = {"M": 1e6, "G": 1e9}  # a kind's leading letter: the value over this


def _column_table(
    table: pd.DataFrame, cols: Sequence[tuple[str, str, int, str]]
) -> tuple[str, Callable[[pd.Series], str]]:
    """The header and row formatter of ``cols`` (key, title, width, kind): memory
    (``mem``) in the unit its largest ok value needs (MiB or KiB on a CPU sweep, not 0.00
    GiB), ``M``/``G`` before a format spec: the value in millions/billions, ``+`` a sign,
    ``limit`` the decode limit's short word; a missing figure is ``-``."""
    ok = table[table["status"] == "ok"]
    mem = [float(v) for c, _, _, k in cols if k == "mem" and c in ok for v in ok[c]]
    unit, scale = memory_unit(mem)
    header = " ".join(f"{t.format(u=unit):>{w}}" for _, t, w, _ in cols)

    def cell(v: Any, w: int, kind: str) -> str:
        if kind == "limit":
            return f"{short_limit(v):>{w}}"
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return f"{'-':>{w}}"
        if kind == "mem":
            return f"{v / scale:>{w}.2f}"
        div = _SCALES.get(kind[:1], 1.0)
        kind = kind[1:] if kind[:1] in _SCALES else kind
        sign, spec = ("+", kind[1:]) if kind.startswith("+") else ("", kind)
        return f"{v / div:>{sign}{w}{spec}}"

    def row(r: pd.Series) -> str:
        return " ".join(cell(r.get(c), w, k) for c, _, w, k in cols)

    return header, row


def describe(table: pd.DataFrame, outs: SweepOutputs) -> str:
    """What the CLI prints: the table, the model next to the measurement, fits, findings."""
    if "workload" in table.columns and (table["workload"] == "generate").all():
        header, row = _column_table(prepared(table), GENERATE_COLUMNS)
        return _describe(_table_lines(prepared(table), header, row), outs)
    header, row = _column_table(table, _measured(table))
    return _describe(_table_lines(table, header, row), outs)


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

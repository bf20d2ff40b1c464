"""The generate sweep's section of ``sweep.html`` and its plots: time per token and
bandwidth utilisation against the batch (the measured crossover beside the predicted one),
the KV cache and the peak against the context (the capacity wall), the time per step
against the context (the KV read)."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import numpy as np

from tracekit.reports.sweepparts import figures
from tracekit.reports.sweepparts import save_png as _save
from tracekit.reports.sweepparts import table_html as _table_html
from tracekit.sweep.analysis import SweepAnalysis
from tracekit.sweep.decode_limits import HOST

PLOTS = (
    "decode_time_vs_batch",
    "decode_utilisation_vs_batch",
    "kv_cache_vs_context",
    "tpot_vs_context",
)
ROW_COLUMNS = [
    ("key", "configuration", ""),
    ("status", "status", ""),
    ("ttft_ms", "TTFT ms", ""),
    ("tpot_ms", "time per step ms", ""),
    ("tpot_spread_pct", "p10–p90 spread %", ""),
    ("decode_gpu_busy_ms", "GPU busy ms/step", ""),
    ("decode_host_idle_pct", "GPU idle % of step", ""),
    ("decode_limit", "limit", ""),
    ("time_per_token_ms", "time per token ms", ""),
    ("tokens_per_s", "tokens/s", ""),
    ("model_tpot_ms", "roofline ms", ""),
    ("decode_gemm_ms", "GEMM ms/step", ""),
    ("decode_bw_util_pct", "% copy ceiling (model bytes / step)", ""),
    ("decode_busy_bw_util_pct", "% copy ceiling (model bytes / GPU busy)", ""),
    ("decode_kernel_bw_util_pct", "% copy ceiling (kernel bytes)", ""),
    ("decode_gemm_flops_util_pct", "GEMM % matmul roof", ""),
    ("peak_bytes", "peak GiB", "gib"),
    ("weights_bytes", "weights GiB", "gib"),
    ("kv_cache_bytes", "KV cache GiB", "gib"),
    ("model_gemm_ridge_batch", "GEMM ridge batch (roofline)", ""),
    ("error", "error", ""),
]
FIT_COLUMNS = [
    ("fit", "fit", ""),
    ("quantity", "quantity", ""),
    ("axis", "axis", ""),
    ("line", "line", ""),
    ("exponent", "exponent", ""),
    ("slope", "slope", ""),
    ("r2", "R²", ""),
]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(fixed: dict[str, Any]) -> str:
    return ", ".join(
        f"context {v}" if k == "seq" else f"batch {v}" if k == "batch" else str(v)
        for k, v in fixed.items()
    )


def _axes(ax: Any, x: str, y: str, title: str, log_y: bool = True) -> None:
    """Log₂ x axis (batch, context), log or linear y, labels and title."""
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=10)


def _time_vs_batch(sw: SweepAnalysis, ax: Any) -> bool:
    drawn = False
    for ln in sw.decode_lines["batch"]:
        fixed, ok = ln.fixed, ln.rows[ln.rows["status"] == "ok"]
        if len(ok) < 2:
            continue
        name = _title(fixed)
        b = ok["batch"].to_numpy(dtype=float)
        (line,) = ax.plot(b, ok["time_per_token_ms"], "-o", ms=3, label=f"time per token ({name})")
        ax.plot(b, ok["tpot_ms"], "-s", ms=3, color=line.get_color(), alpha=0.6,
                label=f"time per step ({name})")  # fmt: skip
        if ok["model_tpot_ms"].notna().any():
            ax.plot(b, ok["model_tpot_ms"], "--", color=line.get_color(), alpha=0.6,
                    label=f"roofline time per step ({name})")  # fmt: skip
        host = ok[(ok["decode_limit"] == HOST).to_numpy()]
        if len(host):
            ax.plot(host["batch"], host["tpot_ms"], "kx", ms=6,
                    label=f"launch/host-bound step ({name})")  # fmt: skip
        if ok["decode_gpu_busy_ms"].notna().any():
            ax.plot(b, ok["decode_gpu_busy_ms"], "-.v", ms=3, color=line.get_color(), alpha=0.8,
                    label=f"GPU busy time per step ({name})")  # fmt: skip
        if ok["decode_gemm_ms"].notna().any():
            ax.plot(b, ok["decode_gemm_ms"], ":^", ms=3, color=line.get_color(),
                    label=f"decode GEMMs' GPU time per step ({name})")  # fmt: skip
        c = ln.crossover
        if c is not None and c.batch is not None:
            ax.axvline(c.batch, color=line.get_color(), lw=1.2,
                       label=f"measured crossover ≈ {c.batch:.0f}")  # fmt: skip
        if c is not None and c.predicted is not None:
            ax.axvline(c.predicted, color=line.get_color(), lw=1.2, ls="--",
                       label=f"predicted (the GEMMs' weight rate) {c.predicted:.0f}")  # fmt: skip
        if c is not None and c.roofline is not None:
            ax.axvline(c.roofline, color=line.get_color(), lw=0.8, ls=":",
                       label=f"roofline ridge (copy ceiling) {c.roofline:.0f}")  # fmt: skip
        drawn = True
    _axes(ax, "batch", "ms", "Decode: time per token and per step vs batch")
    return drawn


def _utilisation_vs_batch(sw: SweepAnalysis, ax: Any) -> bool:
    drawn = False
    for ln in sw.decode_lines["batch"]:
        fixed, ok = ln.fixed, ln.rows[ln.rows["status"] == "ok"]
        name = _title(fixed)
        for col, style, what in (
            ("decode_bw_util_pct", "-o", "bandwidth, model bytes / time per step"),
            ("decode_busy_bw_util_pct", "-.v", "bandwidth, model bytes / GPU busy time"),
            ("decode_kernel_bw_util_pct", "-s", "bandwidth, kernel bytes"),
            ("decode_gemm_flops_util_pct", "-^", "GEMM FLOP/s of the matmul roof"),
        ):
            if col in ok and ok[col].notna().any():
                ax.plot(ok["batch"], ok[col], style, ms=3, label=f"{what} ({name})")
                drawn = True
    _axes(ax, "batch", "% of the measured roof", "Decode: bandwidth and compute utilisation "
          "vs batch", log_y=False)  # fmt: skip
    ax.set_ylim(0, 105)
    return drawn


def _kv_vs_context(sw: SweepAnalysis, ax: Any) -> bool:
    drawn = False
    for ln in sw.decode_lines["seq"]:
        fixed, g = ln.fixed, ln.rows
        ok = g[g["status"] == "ok"]
        if not len(ok):
            continue
        name = _title(fixed)
        x = ok["seq"].to_numpy(dtype=float)
        (line,) = ax.plot(x, ok["peak_bytes"] / 2**30, "-o", ms=3, label=f"peak ({name})")
        ax.plot(x, ok["kv_cache_bytes"] / 2**30, "-s", ms=3, color=line.get_color(), alpha=0.7,
                label=f"KV cache ({name})")  # fmt: skip
        ax.plot(x, ok["weights_bytes"] / 2**30, ":", color=line.get_color(), label="weights")
        w = ln.wall
        if w is not None and math.isfinite(w.device_bytes):
            ax.axhline(w.device_bytes / 2**30, color="k", lw=1, label="device memory")
            if w.wall is not None and w.oom_at is None:
                xs = np.array([x[0], max(x[-1], w.wall)])
                ax.plot(xs, (w.intercept_bytes + w.slope_bytes * xs) / 2**30, "--",
                        color=line.get_color(), lw=0.8,
                        label=f"peak's fit: wall at context ≈ {w.wall:,.0f}")  # fmt: skip
        for v in g[g["status"] == "oom"]["seq"]:
            ax.axvline(float(v), color="tab:red", ls="--", lw=1, label=f"OOM at context {int(v)}")
        drawn = True
    _axes(ax, "context (prompt + new tokens)", "GiB",
          "KV cache and peak memory vs context: the capacity wall")  # fmt: skip
    return drawn


def _tpot_vs_context(sw: SweepAnalysis, ax: Any) -> bool:
    drawn = False
    for ln in sw.decode_lines["seq"]:
        fixed, ok = ln.fixed, ln.rows[ln.rows["status"] == "ok"]
        if len(ok) < 2:
            continue
        name = _title(fixed)
        ax.plot(ok["seq"], ok["tpot_ms"], "-o", ms=3, label=f"measured ({name})")
        if ok["model_tpot_ms"].notna().any():
            ax.plot(ok["seq"], ok["model_tpot_ms"], "--", label=f"roofline ({name})")
        drawn = True
    _axes(ax, "context (prompt + new tokens)", "time per decode step [ms]",
          "Decode: time per step vs context (the KV cache read)", log_y=False)  # fmt: skip
    ax.set_ylim(bottom=0)
    return drawn


DRAW = {
    "decode_time_vs_batch": _time_vs_batch,
    "decode_utilisation_vs_batch": _utilisation_vs_batch,
    "kv_cache_vs_context": _kv_vs_context,
    "tpot_vs_context": _tpot_vs_context,
}


def render_plots(sw: SweepAnalysis, out_dir: Path) -> dict[str, Path]:
    """The generate sweep's PNGs (``sweep_<name>.png``); name -> path of those drawn."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    for name in PLOTS:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        if DRAW[name](sw, ax):
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=6)
            made[name] = _save(fig, out_dir / f"sweep_{name}.png")
        else:
            plt.close(fig)
    return made


def render_section(sw: SweepAnalysis, out_dir: Path, *, inline: bool, title: str) -> str:
    """The generate sweep's section: findings, crossovers and walls, configurations,
    fits, plots."""
    plots = render_plots(sw, out_dir)
    walls = sw.walls
    parts = [f"<section class='sweep'><h2>{html.escape(title)}</h2>"]
    parts.append("<h3>Findings</h3><p>" + " ".join(html.escape(s) for s in sw.findings) + "</p>")
    if len(walls):
        cols = [(c, c.replace("_", " "), "") for c in walls.columns]
        parts.append("<h3>Crossover and capacity wall per line</h3>" + _table_html(walls, cols))
    parts.append("<h3>Configurations</h3>" + _table_html(sw.table, ROW_COLUMNS))
    if len(sw.fits):
        parts.append("<h3>Fits</h3>" + _table_html(sw.fits, FIT_COLUMNS))
    parts += figures(PLOTS, plots, inline)
    parts.append("</section>")
    return "\n".join(parts)

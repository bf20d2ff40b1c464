"""The sweep section of the HTML report, its plots and its TensorBoard scalars.

``render_section(table, out_dir)`` writes PNGs (matplotlib, Agg) into ``out_dir`` and
returns a self-contained ``<section>`` (images referenced by relative file name, or
inlined as data URIs with ``inline=True``). ``write_tensorboard(table, logdir)`` writes
scalars with TensorBoard's own event writer (no torch).
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import pandas as pd

import tracekit.reports.sweepgen as sweepgen
from tracekit.classify.models.memory import CATEGORIES
from tracekit.io import atomic_write_bytes
from tracekit.reports.sweepparts import figures
from tracekit.reports.sweepparts import plt_module as _plt
from tracekit.reports.sweepparts import save_png as _save
from tracekit.reports.sweepparts import table_html as _table_html
from tracekit.sweep.analysis import SweepAnalysis
from tracekit.sweep.rows import CLASSES

CATEGORY_COLORS = {
    "parameters": "#4c72b0",
    "gradients": "#dd8452",
    "optimizer_state": "#55a868",
    "activations": "#c44e52",
    "other": "#8c8c8c",
}
PLOTS = (
    "memory_vs_batch",
    "memory_vs_seq",
    "throughput_vs_batch",
    "throughput_vs_seq",
    "time_share_vs_seq",
    "utilisation_vs_batch",
)


def _line_title(fixed: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" if k in ("batch", "seq") else str(v) for k, v in fixed.items())


def _memory_stacked(sw: SweepAnalysis, axis: str, path: Path) -> Path | None:
    ls = sw.lines[axis]
    if not ls:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(ls), figsize=(4.2 * len(ls), 3.6), squeeze=False)
    for ax, line in zip(axes[0], ls, strict=True):
        g = line.rows
        xs = [str(int(v)) for v in g[axis]]
        bottom = [0.0] * len(g)
        if sw.categories:
            for c in CATEGORIES:
                vals = (g[f"mem_{c}_bytes"].fillna(0) / 2**30).tolist()
                ax.bar(xs, vals, bottom=bottom, label=c.replace("_", " "), color=CATEGORY_COLORS[c])
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        else:
            ax.bar(xs, (g["peak_bytes"] / 2**30).tolist(), color="#8c8c8c", label="peak")
        if "model_peak_bytes" in g:
            ax.plot(
                xs, (g["model_peak_bytes"] / 2**30).tolist(), "k--o", ms=3, label="analytic model"
            )
        ax.set_xlabel(axis)
        ax.set_ylabel("GiB at the peak")
        ax.set_title(_line_title(line.fixed), fontsize=9)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Memory by category vs {axis}", fontsize=10)
    return _save(fig, path)


def _throughput(sw: SweepAnalysis, axis: str, path: Path) -> Path | None:
    ls = sw.lines[axis]
    if not ls:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for line in ls:
        g = line.rows
        ax.plot(g[axis], g["tokens_per_s"], "-o", ms=3, label=_line_title(line.fixed))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(axis)
    ax.set_ylabel("tokens/s")
    ax.legend(fontsize=7)
    ax.set_title(f"Throughput vs {axis}", fontsize=10)
    return _save(fig, path)


def _time_share(sw: SweepAnalysis, path: Path) -> Path | None:
    ls = sw.share_lines
    if not ls:
        return None  # no device time shared out (a CPU sweep) or no shares filled
    plt = _plt()
    fig, axes = plt.subplots(1, len(ls), figsize=(4.5 * len(ls), 3.6), squeeze=False)
    for ax, line in zip(axes[0], ls, strict=True):
        fixed, g = line.fixed, line.rows
        xs = [str(int(v)) for v in g["seq"]]
        bottom = [0.0] * len(g)
        for c in CLASSES:
            vals = g[f"time_share_{c}_pct"].fillna(0).tolist()
            if max(vals) < 1:
                continue
            ax.bar(xs, vals, bottom=bottom, label=c)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xlabel("seq")
        ax.set_ylabel("% of GPU time")
        ax.set_title(_line_title(fixed), fontsize=9)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


def _utilisation(sw: SweepAnalysis, path: Path) -> Path | None:
    series = [
        (col, style, f"{what} ({_line_title(line.fixed)})", g)
        for line in sw.lines["batch"]
        for g in (line.rows,)
        for col, style, what in (
            ("bw_util_pct", "-o", "DRAM bandwidth"),
            ("model_flops_util_pct", "-s", "model FLOP/s of matmul roof"),
            ("gpu_idle_pct", ":^", "GPU idle"),
        )
        if col in g and not g[col].isna().all()
    ]
    if not series:
        return None  # nothing measured to draw (an empty plot, its legend a warning)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for col, style, label, g in series:
        ax.plot(g["batch"], g[col], style, ms=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch")
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=6)
    ax.set_title("Utilisation vs batch", fontsize=10)
    return _save(fig, path)


def render_plots(sw: SweepAnalysis, out_dir: Path) -> dict[str, Path]:
    """Write the sweep's PNGs into ``out_dir``; returns name -> path of those drawn."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    made = {
        "memory_vs_batch": _memory_stacked(sw, "batch", out_dir / "sweep_memory_vs_batch.png"),
        "memory_vs_seq": _memory_stacked(sw, "seq", out_dir / "sweep_memory_vs_seq.png"),
        "throughput_vs_batch": _throughput(sw, "batch", out_dir / "sweep_throughput_vs_batch.png"),
        "throughput_vs_seq": _throughput(sw, "seq", out_dir / "sweep_throughput_vs_seq.png"),
        "time_share_vs_seq": _time_share(sw, out_dir / "sweep_time_share_vs_seq.png"),
        "utilisation_vs_batch": _utilisation(sw, out_dir / "sweep_utilisation_vs_batch.png"),
    }
    return {k: v for k, v in made.items() if v is not None}


ROW_COLUMNS = [
    ("key", "configuration", ""),
    ("status", "status", ""),
    ("step_time_ms", "step ms", ""),
    ("tokens_per_s", "tokens/s", ""),
    ("peak_bytes", "peak GiB", "gib"),
    ("peak_reserved_bytes", "reserved GiB", "gib"),
    ("mem_activations_bytes", "activations GiB", "gib"),
    ("model_peak_bytes", "model GiB", "gib"),
    ("model_error_pct", "model error %", "pct"),
    ("gpu_idle_pct", "GPU idle %", ""),
    ("model_flops_util_pct", "FLOP/s % of roof", ""),
    ("bw_util_pct", "DRAM BW %", ""),
    ("error", "error", ""),
]
MODEL_COLUMNS = (
    [("key", "configuration", "")]
    + [
        x
        for c in CATEGORIES
        for x in (
            (f"mem_{c}_bytes", f"{c} measured GiB", "gib"),
            (f"model_{c}_bytes", f"{c} model GiB", "gib"),
        )
    ]
    + [("model_peak_phase", "model peak phase", "")]
)
FIT_COLUMNS = [
    ("quantity", "quantity", ""),
    ("axis", "axis", ""),
    ("line", "line", ""),
    ("exponent", "exponent", ""),
    ("r2", "R²", ""),
    ("quad_c", "c (T²)", ""),
    ("quad_r2", "quadratic R²", ""),
    ("t2_share_at_max", "T² share at max", ""),
]


def render_section(
    sw: SweepAnalysis, out_dir: Path, *, inline: bool = False, title: str = "Sweep"
) -> str:
    """The sweep section as HTML from its analysis (``tracekit.sweep.analysis``); the PNGs
    go to ``out_dir`` (a generate sweep's: :mod:`tracekit.reports.sweepgen`)."""
    if sw.generate:
        return sweepgen.render_section(sw, out_dir, inline=inline, title=title)
    plots = render_plots(sw, out_dir)
    table, fits, big = sw.table, sw.fits, sw.largest
    parts = [f"<section class='sweep'><h2>{html.escape(title)}</h2>"]
    parts.append("<h3>Findings</h3><p>" + " ".join(html.escape(s) for s in sw.findings) + "</p>")
    parts.append("<h3>Configurations</h3>" + _table_html(table, ROW_COLUMNS))
    ok = table[table["status"] == "ok"]
    if len(ok):
        parts.append(
            "<h3>Memory at the peak: measured (memory timeline) vs analytic model"
            "</h3>" + _table_html(ok, MODEL_COLUMNS)
        )
    if len(fits):
        parts.append("<h3>Scaling fits</h3>" + _table_html(fits, FIT_COLUMNS))
    if len(big):
        parts.append(
            "<h3>Largest configuration that fits</h3>"
            + _table_html(big, [(c, c.replace("_", " "), "") for c in big.columns])
        )
    parts += figures(PLOTS, plots, inline)
    parts.append("</section>")
    return "\n".join(parts)


def write_html(sw: SweepAnalysis, out_dir: Path) -> Path:
    """A standalone page around :func:`render_section` (``sweep.html`` in ``out_dir``)."""
    section = render_section(sw, out_dir)
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table.sweep{border-collapse:collapse;font-size:12px;margin:8px 0}"
        "table.sweep td,table.sweep th{border:1px solid #ccc;padding:2px 6px}"
        "img{max-width:100%}"
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tracekit sweep</title>"
        f"<style>{style}</style></head><body>{section}</body></html>"
    )
    path = Path(out_dir) / "sweep.html"
    atomic_write_bytes(path, page.encode())
    return path


SCALARS = (
    "step_time_ms",
    "tokens_per_s",
    "samples_per_s",
    "peak_bytes",
    "peak_reserved_bytes",
    "avg_allocated_bytes",
    "mem_per_token_bytes",
    "model_peak_bytes",
    "model_error_pct",
    "gpu_idle_pct",
    "model_flops_util_pct",
    "bw_util_pct",
    "memory_bound_time_pct",
    *(f"mem_{c}_bytes" for c in CATEGORIES),
    # generate sweeps (NaN, so absent, in training rows)
    "ttft_ms",
    "tpot_ms",
    "time_per_token_ms",
    "decode_bw_util_pct",
    "decode_kernel_bw_util_pct",
    "decode_gemm_ms",
    "decode_gemm_flops_util_pct",
    "model_tpot_ms",
    "kv_cache_bytes",
    "weights_bytes",
)


def write_tensorboard(sw: SweepAnalysis, logdir: Path) -> list[Path]:
    """Scalars per configuration (run ``<key>``, step 0) and along each axis (run
    ``<axis>@<line>``, step = the axis value), with TensorBoard's own event writer."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = Path(logdir)
    table = sw.table
    written: list[Path] = []

    def emit(run: str, points: list[tuple[int, dict[str, float]]]) -> None:
        w = EventFileWriter(str(logdir / run))
        for step, vals in points:
            values = [
                summary_pb2.Summary.Value(tag=f"sweep/{k}", simple_value=v)
                for k, v in vals.items()
                if not math.isnan(v)
            ]
            w.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=values)))
        w.flush()
        w.close()
        written.append(logdir / run)

    def vals(r: pd.Series) -> dict[str, float]:
        out = {}
        for k in SCALARS:
            v = r.get(k)
            if v is not None and not pd.isna(v):
                out[k] = float(v)
        return out

    ok = table[table["status"] == "ok"]
    for _, r in ok.iterrows():
        emit(str(r["key"]), [(0, vals(r))])
    for axis in ("batch", "seq"):
        for line in sw.lines[axis]:
            name = f"{axis}@" + "-".join(str(v) for v in line.fixed.values())
            emit(name, [(int(r[axis]), vals(r)) for _, r in line.rows.iterrows()])
    return written

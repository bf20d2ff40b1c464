"""The report's plots as PNG bytes (matplotlib's Agg canvas; no pyplot global state).

* ``time_share``: GPU time share and FLOP share per class, side by side;
* ``roofline``: log-log attained FLOP/s vs arithmetic intensity, one roof per precision
  pipe, one point per operator group sized by its GPU time;
* ``memory_timeline``: allocated and reserved bytes over time with step boundaries, or the
  per-category stack when the run folder has PyTorch's category export.

Strings from the trace (device names) reach matplotlib only through :func:`_plain`, which
escapes ``$`` so that mathtext never interprets them (``usetex`` is never used).
"""

from __future__ import annotations

import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from tracekit.summary import Roofs, Summary
from tracekit.summary.classes import ORDER as CLASS_ORDER

from . import fmt

DPI = 100
MAX_STEP_LABELS = 16  # memory timeline: every step gets its line, at most this many a label
_CMAP = matplotlib.colormaps["tab20"]
CLASS_COLORS = {c: _CMAP(i % 20) for i, c in enumerate(CLASS_ORDER)}


def _color(cls: str) -> tuple[float, float, float, float]:
    c = CLASS_COLORS.get(cls)
    return c if c is not None else (0.5, 0.5, 0.5, 1.0)


def _plain(text: str) -> str:
    """``text`` shown literally: a ``$`` pair would otherwise start mathtext."""
    return text.replace("\\", "\\\\").replace("$", r"\$")


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": "tracekit"})
    return buf.getvalue()


def _message(fig: Figure, title: str, text: str) -> bytes:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=11)
    return _png(fig)


def time_share(sm: Summary) -> bytes:
    cl = sm.classes
    fig = Figure(figsize=(9, 0.42 * max(4, len(cl)) + 1.2))
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.12)
    if cl.empty or not np.isfinite(cl["time_share_pct"]).any():
        return _message(fig, "GPU time per class", "no GPU activity in the analysed steps")
    ax = fig.add_subplot()
    y = np.arange(len(cl))
    has_flops = bool(np.nansum(cl["flop_share_pct"].to_numpy(dtype=float)) > 0)
    h = 0.4 if has_flops else 0.7
    t = np.nan_to_num(cl["time_share_pct"].to_numpy(dtype=float))
    colors = [_color(c) for c in cl["class"]]
    ax.barh(y - (h / 2 if has_flops else 0), t, height=h, color=colors, label="GPU time")
    if has_flops:
        f = np.nan_to_num(cl["flop_share_pct"].to_numpy(dtype=float))
        ax.barh(
            y + h / 2,
            f,
            height=h,
            color=colors,
            alpha=0.45,
            hatch="//",
            edgecolor="0.3",
            label="FLOPs",
        )
    for yi, (share, msv) in enumerate(zip(t, cl["ms_per_step"], strict=True)):
        ax.text(
            share,
            yi - (h / 2 if has_flops else 0),
            f" {share:.1f} % ({fmt.ms(msv)}/step)",
            va="center",
            fontsize=8,
        )
    if has_flops:
        for yi, share in enumerate(f):
            if share >= 0.05:
                ax.text(
                    share,
                    yi + h / 2,
                    f" {share:.1f} % of FLOPs",
                    va="center",
                    fontsize=7,
                    color="0.3",
                )
    ax.set_yticks(y, [_plain(str(c)) for c in cl["class"]])
    ax.invert_yaxis()
    top = max(
        float(t.max()),
        float(np.nanmax(cl["flop_share_pct"].to_numpy(dtype=float))) if has_flops else 0.0,
    )
    ax.set_xlim(0, max(100.0, top * 1.2))
    ax.set_xlabel("% of summed GPU activity time" + (" / % of FLOPs" if has_flops else ""))
    ax.set_title("GPU time per class" + (" vs FLOPs" if has_flops else ""))
    if has_flops:
        ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def roofline_points(ops: pd.DataFrame, max_points: int = 400) -> pd.DataFrame:
    """The operator groups a roofline can place: positive, finite intensity and FLOP/s."""
    x = ops["intensity"].to_numpy(dtype=float)
    y = ops["attained_flops"].to_numpy(dtype=float)
    frame: pd.DataFrame = ops[np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)].head(max_points)
    return frame


def roof_lines(ax: Any, roofs: Roofs, xs: np.ndarray, ls: str = "-", prefix: str = "") -> None:
    """One roof per precision pipe (min of peak and bandwidth × intensity) on ``ax``."""
    if not roofs.bandwidth:
        return
    pipes = sorted(roofs.peaks.items(), key=lambda kv: -kv[1])
    for i, (pipe, peak) in enumerate(pipes):
        ys = np.minimum(peak, roofs.bandwidth * xs)
        ax.plot(
            xs,
            ys,
            color=matplotlib.colormaps["Dark2"](i % 8),
            lw=1.4,
            ls=ls,
            label=_plain(f"{prefix}{pipe}: {fmt.si(peak, 'FLOP/s')}"),
        )
    ax.plot([], [], " ", label=_plain(f"{prefix}memory: {fmt.si(roofs.bandwidth, 'B/s')}"))


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(x: float, _pos: object = None) -> str:
    """``10ⁿ`` in plain text (Unicode superscripts) at a power of ten, else nothing: what
    matplotlib's log axis shows, without its mathtext labels, whose parsing alone took a
    fifth of a second per plot."""
    if not (x > 0 and math.isfinite(x)):
        return ""
    e = round(math.log10(x))
    return "10" + str(e).translate(_SUPERSCRIPT) if math.isclose(x, 10.0**e) else ""


def log_axes(ax: Any) -> None:
    """Log-log axes with decade labels in plain text and no minor ticks (hundreds of minor
    tick artists cost more than a plot's points)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(_decade))
    ax.yaxis.set_major_formatter(FuncFormatter(_decade))


def roofline(sm: Summary, max_points: int = 400) -> bytes:
    ops = sm.operators
    fig = Figure(figsize=(9, 6))
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.09)
    pts = roofline_points(ops, max_points)
    roofs = sm.roofs
    if pts.empty and not roofs.known:
        return _message(
            fig,
            "Roofline",
            "no operator has both a FLOP and a byte count "
            "(input shapes not recorded?) and the device roofline is unknown",
        )
    ax = fig.add_subplot()
    x = pts["intensity"].to_numpy(dtype=float)
    y = pts["attained_flops"].to_numpy(dtype=float)
    lo = min([0.01, *x.tolist()]) / 2
    hi = max([1e4, *x.tolist()]) * 2
    xs = np.logspace(np.log10(lo), np.log10(hi), 256)
    roof_lines(ax, roofs, xs)
    if len(pts):
        t = pts["gpu_time_ns"].to_numpy(dtype=float)
        size = 20 + 600 * np.sqrt(t / t.max())
        colors = [_color(c) for c in pts["class"]]
        ax.scatter(x, y, s=size, c=colors, alpha=0.6, edgecolors="0.2", linewidths=0.5)
        for c in dict.fromkeys(pts["class"]):
            ax.scatter([], [], s=40, color=_color(str(c)), label=_plain(f"class {c}"))
    log_axes(ax)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("attained [FLOP/s]")
    name = sm.header.device or roofs.device or "unknown device"
    ax.set_title(_plain(f"Roofline, {name} (points: operators, area ∝ GPU time)"))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    return _png(fig)


def _step_lines(ax: Any, xs: np.ndarray, on_x: Any) -> None:
    """Dotted full-height lines at ``xs`` as one collection: what an ``axvline`` per step
    drew (85 of them took a tenth of a second), including its autoscaling, which widens
    the x range only when a line lies outside the range the data gives."""
    segments = np.stack([np.column_stack([xs, np.zeros_like(xs)]),
                         np.column_stack([xs, np.ones_like(xs)])], axis=1)  # fmt: skip
    lines = LineCollection(segments, transform=on_x, colors="0.4", linewidths=0.8, linestyles=":")
    ax.add_collection(lines, autolim=False)
    lo, hi = ax.get_xbound()
    outside = np.flatnonzero((xs < lo) | (xs > hi))
    if len(outside):
        ax.dataLim.update_from_data_x(xs[: outside[-1] + 1], ignore=False)
        ax.autoscale_view(scaley=False)


def memory_timeline(sm: Summary) -> bytes:
    fig = Figure(figsize=(10, 4.8))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.91, bottom=0.11)
    tl = sm.memory_timeline
    cat = sm.categories
    if tl.empty and cat is None:
        return _message(
            fig,
            "Memory timeline",
            "no [memory] events in the trace (profile_memory off) and no per-category export",
        )
    ax = fig.add_subplot()
    scale, unit = (2**30, "GiB")
    peak = float(np.nanmax(tl["reserved"])) if len(tl) else 0.0
    if cat is not None and len(cat.timeline.times_us):
        peak = max(peak, float(cat.timeline.bytes.sum(axis=1).max()))
    if peak < 2**30:
        scale, unit = (2**20, "MiB")
    if cat is not None and len(cat.timeline.times_us):
        t_ns = cat.timeline.times_us * 1e3
        t_ms = ((t_ns + cat.offset_ns) if cat.offset_ns is not None else (t_ns - t_ns[0])) / 1e6
        ax.stackplot(
            t_ms,
            *(cat.timeline.bytes.T / scale),
            labels=[_plain(c) for c in cat.timeline.categories],
            alpha=0.8,
            step="post",
        )
    if len(tl) and (cat is None or cat.offset_ns is not None):
        t = tl["ts"].to_numpy(dtype=float) / 1e6
        ax.step(t, tl["allocated"] / scale, where="post", color="k", lw=1.1, label="allocated")
        ax.step(
            t,
            tl["reserved"] / scale,
            where="post",
            color="tab:red",
            lw=1.0,
            ls="--",
            label="reserved",
        )
    if (cat is None or cat.offset_ns is not None) and sm.steps:
        starts = np.asarray(sm.step_starts_ns, dtype=float) / 1e6
        on_x = ax.get_xaxis_transform()
        _step_lines(ax, starts, on_x)
        every = math.ceil(len(starts) / MAX_STEP_LABELS)  # more would overlap
        for step, ts in zip(sm.steps[::every], starts[::every], strict=True):
            ax.text(ts, 1.0, f" step {step}", transform=on_x, fontsize=7, va="top", color="0.3")
    ax.set_xlabel("time since trace start [ms]")
    ax.set_ylabel(f"device memory [{unit}]")
    ax.set_title(
        _plain(
            f"Memory timeline{' (' + sm.memory.device + ')' if sm.memory else ''}"
            + (", by category" if cat is not None else "")
        )
    )
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncols=3)
    return _png(fig)


def all_plots(sm: Summary) -> dict[str, bytes]:
    """name -> PNG bytes, in the report's order."""
    return {
        "time_share": time_share(sm),
        "roofline": roofline(sm),
        "memory_timeline": memory_timeline(sm),
    }


__all__ = ["CLASS_COLORS", "all_plots", "log_axes", "memory_timeline", "roofline", "time_share"]

"""Drawing the report's plots, as PNG bytes, from plain data (matplotlib's Agg canvas; no
pyplot global state).

The data are builtins and numpy arrays that :mod:`tracekit.reports.plots` extracts from a
:class:`tracekit.summary.Summary` (numbers already formatted into label text). This module
imports nothing from tracekit and not pandas, so that the report can run it in a separate
process (:func:`serve`) that draws while the report classifies and summarises: for a large
trace that takes matplotlib's import and most of the drawing off the report's wall time.

Strings from the trace (device names, classes, categories) reach matplotlib only through
:func:`plain`, which escapes ``$`` so that mathtext never interprets them (``usetex`` is
never used).
"""

from __future__ import annotations

import io
import math
import pickle
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

DPI = 100
MAX_STEP_LABELS = 16  # memory timeline: every step gets its line, at most this many a label
_CMAP = matplotlib.colormaps["tab20"]
_GREY = (0.5, 0.5, 0.5, 1.0)

Color = tuple[float, float, float, float]


def class_color(cls: str, order: Sequence[str]) -> Color:
    """The colour of a class: its place in the report's class order on tab20, else grey."""
    for i, c in enumerate(order):
        if c == cls:
            rgba: Color = _CMAP(i % 20)
            return rgba
    return _GREY


def plain(text: str) -> str:
    """``text`` shown literally: a ``$`` pair would otherwise start mathtext."""
    return text.replace("\\", "\\\\").replace("$", r"\$")


def png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": "tracekit"})
    return buf.getvalue()


def message(fig: Figure, title: str, text: str) -> bytes:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=11)
    return png(fig)


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


def roof_lines(
    ax: Any, roofs: dict[str, Any], xs: np.ndarray, ls: str = "-", prefix: str = ""
) -> None:
    """One roof per precision pipe (min of peak and bandwidth × intensity) on ``ax``.

    ``roofs``: ``bandwidth`` (B/s, falsy: unknown), ``bandwidth_label``, ``peaks`` (a list
    of (pipe, FLOP/s, label) in the order drawn)."""
    bw = roofs["bandwidth"]
    if not bw:
        return
    for i, (pipe, peak, label) in enumerate(roofs["peaks"]):
        ys = np.minimum(peak, bw * xs)
        ax.plot(xs, ys, color=matplotlib.colormaps["Dark2"](i % 8), lw=1.4, ls=ls,
                label=plain(f"{prefix}{pipe}: {label}"))  # fmt: skip
    ax.plot([], [], " ", label=plain(f"{prefix}memory: {roofs['bandwidth_label']}"))


def time_share(d: dict[str, Any]) -> bytes:
    """``classes``, ``order``, ``time_share_pct`` and ``flop_share_pct`` (arrays, NaN:
    none), ``ms_per_step`` (label text per class)."""
    classes = d["classes"]
    time, summed = d.get("time", "GPU time"), d.get("summed", "GPU activity time")
    fig = Figure(figsize=(9, 0.42 * max(4, len(classes)) + 1.2))
    fig.subplots_adjust(left=0.15, right=0.97, top=0.9, bottom=0.12)
    share, flop_share = d["time_share_pct"], d["flop_share_pct"]
    if not len(classes) or not np.isfinite(share).any():
        return message(fig, f"{time} per class", f"no {summed} in the analysed steps")
    ax = fig.add_subplot()
    y = np.arange(len(classes))
    has_flops = bool(np.nansum(flop_share) > 0)
    h = 0.4 if has_flops else 0.7
    t = np.nan_to_num(share)
    colors = [class_color(c, d["order"]) for c in classes]
    ax.barh(y - (h / 2 if has_flops else 0), t, height=h, color=colors, label=time)
    if has_flops:
        f = np.nan_to_num(flop_share)
        ax.barh(y + h / 2, f, height=h, color=colors, alpha=0.45, hatch="//", edgecolor="0.3",
                label="FLOPs")  # fmt: skip
    for yi, (s, ms) in enumerate(zip(t, d["ms_per_step"], strict=True)):
        ax.text(s, yi - (h / 2 if has_flops else 0), f" {s:.1f} % ({ms}/step)", va="center",
                fontsize=8)  # fmt: skip
    if has_flops:
        for yi, s in enumerate(f):
            if s >= 0.05:
                ax.text(s, yi + h / 2, f" {s:.1f} % of FLOPs", va="center", fontsize=7,
                        color="0.3")  # fmt: skip
    ax.set_yticks(y, [plain(str(c)) for c in classes])
    ax.invert_yaxis()
    top = max(float(t.max()), float(np.nanmax(flop_share)) if has_flops else 0.0)
    ax.set_xlim(0, max(100.0, top * 1.2))
    ax.set_xlabel(f"% of summed {summed}" + (" / % of FLOPs" if has_flops else ""))
    ax.set_title(f"{time} per class" + (" vs FLOPs" if has_flops else ""))
    if has_flops:
        ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return png(fig)


def roofline(d: dict[str, Any]) -> bytes:
    """``intensity``, ``attained_flops``, ``gpu_time_ns`` (arrays) and ``classes`` of the
    points, ``order``, ``roofs`` (:func:`roof_lines`), ``known`` (the device roofline is),
    ``device`` (name for the title)."""
    fig = Figure(figsize=(9, 6))
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.09)
    x, y, classes = d["intensity"], d["attained_flops"], d["classes"]
    if not len(x) and not d["known"]:
        return message(
            fig,
            "Roofline",
            "no operator has both a FLOP and a byte count "
            "(input shapes not recorded?) and the device roofline is unknown",
        )
    ax = fig.add_subplot()
    lo = min([0.01, *x.tolist()]) / 2
    hi = max([1e4, *x.tolist()]) * 2
    xs = np.logspace(np.log10(lo), np.log10(hi), 256)
    roof_lines(ax, d["roofs"], xs)
    if len(x):
        t = d["gpu_time_ns"]
        size = 20 + 600 * np.sqrt(t / t.max())
        colors = [class_color(c, d["order"]) for c in classes]
        ax.scatter(x, y, s=size, c=colors, alpha=0.6, edgecolors="0.2", linewidths=0.5)
        for c in dict.fromkeys(classes):
            ax.scatter([], [], s=40, color=class_color(str(c), d["order"]),
                       label=plain(f"class {c}"))  # fmt: skip
    log_axes(ax)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("attained [FLOP/s]")
    area = d.get("time", "GPU time")
    ax.set_title(plain(f"Roofline, {d['device']} (points: operators, area ∝ {area})"))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    return png(fig)


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


def _kv_axis(ax: Any, kv: dict[str, Any], end_ms: float) -> None:
    """A generate run's KV cache on a right-hand axis of its own scale: the bytes that
    hold tokens from each decode step's start (to ``end_ms`` for the last) against the
    preallocated cache."""
    kax = ax.twinx()
    top = max(float(kv["allocated"]), max(kv["filled"]))
    scale, unit = (2**30, "GiB") if top >= 2**30 else (2**20, "MiB")
    t = np.asarray(kv["starts_ns"], dtype=float) / 1e6
    filled = np.asarray(kv["filled"], dtype=float) / scale
    t, filled = np.append(t, max(end_ms, t[-1])), np.append(filled, filled[-1])
    kax.step(t, filled, where="post", color="tab:purple", lw=1.8,
             label="KV cache filled (right axis)")  # fmt: skip
    kax.axhline(kv["allocated"] / scale, color="tab:purple", ls=":", lw=1.0,
                label="KV cache preallocated (right axis)")  # fmt: skip
    kax.set_ylim(0, 1.08 * top / scale)
    kax.set_ylabel(f"KV cache [{unit}]", color="tab:purple")
    kax.legend(fontsize=7, loc="lower right")


def memory_timeline(d: dict[str, Any]) -> bytes:
    """``ts`` [ns], ``allocated``, ``reserved`` [bytes] (arrays), ``categories`` (None, or
    ``names``, ``times_us``, ``bytes`` (rows × names) and ``offset_ns`` (None: not
    aligned)), ``steps`` and ``step_starts_ns``, ``device`` (None: no memory figures)."""
    fig = Figure(figsize=(10, 4.8))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.91, bottom=0.11)
    ts, allocated, reserved = d["ts"], d["allocated"], d["reserved"]
    cat = d["categories"]
    if not len(ts) and cat is None:
        return message(fig, "Memory timeline", "no [memory] events in the trace (profile_memory "
                       "off) and no per-category export")  # fmt: skip
    ax = fig.add_subplot()
    scale, unit = (2**30, "GiB")
    peak = float(np.nanmax(reserved)) if len(ts) else 0.0
    if cat is not None and len(cat["times_us"]):
        peak = max(peak, float(cat["bytes"].sum(axis=1).max()))
    if peak < 2**30:
        scale, unit = (2**20, "MiB")
    if cat is not None and len(cat["times_us"]):
        t_ns = cat["times_us"] * 1e3
        off = cat["offset_ns"]
        t_ms = ((t_ns + off) if off is not None else (t_ns - t_ns[0])) / 1e6
        ax.stackplot(t_ms, *(cat["bytes"].T / scale), labels=[plain(c) for c in cat["names"]],
                     alpha=0.8, step="post")  # fmt: skip
    aligned = cat is None or cat["offset_ns"] is not None
    if len(ts) and aligned:
        t = ts.astype(float) / 1e6
        ax.step(t, allocated / scale, where="post", color="k", lw=1.1, label="allocated")
        ax.step(t, reserved / scale, where="post", color="tab:red", lw=1.0, ls="--",
                label="reserved")  # fmt: skip
    kv = d.get("kv")
    if kv is not None and aligned and len(kv["starts_ns"]):
        fig.subplots_adjust(right=0.91)
        _kv_axis(ax, kv, float(ts.max()) / 1e6 if len(ts) else 0.0)
    steps = d["steps"]
    if aligned and steps:
        starts = np.asarray(d["step_starts_ns"], dtype=float) / 1e6
        on_x = ax.get_xaxis_transform()
        _step_lines(ax, starts, on_x)
        every = math.ceil(len(starts) / MAX_STEP_LABELS)  # more would overlap
        for step, s in zip(steps[::every], starts[::every], strict=True):
            ax.text(s, 1.0, f" step {step}", transform=on_x, fontsize=7, va="top", color="0.3")
    ax.set_xlabel("time since trace start [ms]")
    ax.set_ylabel(f"device memory [{unit}]")
    device = d["device"]
    ax.set_title(plain(f"Memory timeline{' (' + device + ')' if device is not None else ''}"
                       + (", by category" if cat is not None else "")))  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncols=3)
    return png(fig)


def decode_bandwidth(d: dict[str, Any]) -> bytes:
    """A generate run's decode steps: left, the bandwidth each achieves by the decode
    model's, the kernels' and the measured bytes against the roof; right, each step's GPU
    time by kind beside its time per token and the roofline's. ``context``, ``model_bw``,
    ``kernel_bw``, ``measured_bw``, ``model_busy_bw`` (over the GPU busy time) [B/s],
    ``tpot_ms``, ``model_tpot_ms``, ``gemm_ms``,
    ``attention_ms``, ``other_ms`` (arrays, one per step), ``roof`` [B/s] (None:
    unknown), ``roof_label``, ``basis``, ``title``."""
    fig = Figure(figsize=(11, 4.4))
    fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.13, wspace=0.25)
    ctx = d["context"]
    if not len(ctx):
        return message(fig, "Decode bandwidth", "not a generate run")
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for col, style, label in (("model_bw", "-o", "decode model's bytes"),
                              ("kernel_bw", "-s", "kernels' modelled bytes"),
                              ("measured_bw", "-^", "measured DRAM bytes")):  # fmt: skip
        v = d[col]
        if np.isfinite(v).any():
            left.plot(ctx, v / 1e9, style, ms=3, label=f"{label} / time per step")
    busy = d.get("model_busy_bw", np.zeros(0))
    if np.isfinite(busy).any():  # what the kernels reach while they run
        left.plot(ctx, busy / 1e9, "--v", ms=3, label="decode model's bytes / GPU busy time")
    if d["roof"]:
        left.axhline(d["roof"] / 1e9, color="k", ls="--", lw=1,
                     label=plain(f"bandwidth roof {d['roof_label']}"))  # fmt: skip
    left.set_ylim(bottom=0)
    left.set_xlabel("cached tokens (context of the decode step)")
    left.set_ylabel("achieved bandwidth [GB/s]")
    left.set_title(f"Decode step bandwidth ({d.get('basis', 'unprofiled')} time)", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=7, loc="lower right")
    bottom = np.zeros(len(ctx))
    for col, label in (("gemm_ms", "GEMMs"), ("attention_ms", "attention"), ("other_ms", "other")):
        v = np.nan_to_num(d[col])
        right.bar(ctx, v, bottom=bottom, width=0.8, label=f"GPU time: {label}")
        bottom += v
    right.plot(ctx, d["tpot_ms"], "k-o", ms=3, label="time per step")
    if np.isfinite(d["model_tpot_ms"]).any():
        right.plot(ctx, d["model_tpot_ms"], "r--", label="roofline (decode model)")
    right.set_ylim(bottom=0)
    right.set_xlabel("cached tokens (context of the decode step)")
    right.set_ylabel("ms per decode step")
    right.set_title("Decode step time", fontsize=10)
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="lower right")
    fig.suptitle(plain(f"Decode steps: {d['title']}"), fontsize=11)
    return png(fig)


PLOTS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "time_share": time_share,
    "roofline": roofline,
    "memory_timeline": memory_timeline,
    "decode_bandwidth": decode_bandwidth,
}


def serve(inp: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    """The plot worker: read pickled ``(name, data)`` jobs until end of input; answer each
    with a pickled ``(name, png, error)`` (``error``: the traceback text, else None).

    Jobs are read on a thread of their own, so that a job sent while another is drawn never
    blocks the sender on a full pipe."""
    inp = inp if inp is not None else sys.stdin.buffer
    out = out if out is not None else sys.stdout.buffer
    jobs: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()

    def read() -> None:
        try:
            while True:
                jobs.put(pickle.load(inp))
        except (EOFError, OSError, pickle.UnpicklingError):
            jobs.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (job := jobs.get()) is not None:
        name, data = job
        try:
            answer: tuple[str, bytes | None, str | None] = (name, PLOTS[name](data), None)
        except Exception:  # the report draws it again itself and raises there
            answer = (name, None, traceback.format_exc())
        pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


if __name__ == "__main__":
    serve()

"""Drawing the multi-rank plots from plain data (:mod:`tracekit.reports.ranks`): the ranks x
time chart and bus bandwidth against message size."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from tracekit.reports.draw import log_axes, message, plain, png

COLORS = {
    "compute": ("#4a90d9", "compute (any non-communication GPU work)"),
    "comm_overlapped": ("#f0a030", "communication overlapped by compute"),
    "comm_exposed": ("#d9412b", "communication exposed"),
}
ABSENT_COLOR = "#bbbbbb"  # a damaged or missing rank's row
KIND_COLORS = ("#d9412b", "#4a90d9", "#2e9e5b", "#8e5ac8", "#f0a030", "#666666")


def timeline(d: dict[str, Any]) -> bytes:
    """``ranks``, ``lanes`` (what -> [(rank, start_ms, width_ms)]), ``steps`` ([(rank,
    start_ms, time_ms)]): one lane per rank, idle is the white between."""
    ranks = d["ranks"]
    height = 1.6 + 0.45 * max(2, min(len(ranks), 64))  # inches: 1.1 below, 0.5 above
    fig = Figure(figsize=(11, height))
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.45 / height, bottom=1.1 / height)
    if not ranks:
        return message(fig, "ranks x time", "no ranks")
    ax = fig.add_subplot()
    row = {r: i for i, r in enumerate(ranks)}
    for what, (color, label) in COLORS.items():
        spans = d["lanes"].get(what) or []
        by_rank: dict[int, list[tuple[float, float]]] = {}
        for r, x, w in spans:
            by_rank.setdefault(r, []).append((x, w))
        h = 0.7 if what != "comm_overlapped" else 0.3
        for r, xs in by_rank.items():
            ax.broken_barh(xs, (row[r] - h / 2, h), facecolors=color, linewidth=0)
        ax.plot([], [], color=color, lw=6, label=label)
    for r, start, time_ms in d["steps"]:
        y = row.get(r)
        if y is not None:
            ax.plot([start, start], [y - 0.45, y + 0.45], color="0.25", lw=0.8)
            ax.plot([start + time_ms] * 2, [y - 0.45, y + 0.45], color="0.25", lw=0.8, ls=":")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first compared step began (common time base); white: GPU idle")
    ax.set_title(plain(d["title"]))
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return png(fig)


def busbw(d: dict[str, Any]) -> bytes:
    """``points`` (kind -> (bytes, GB/s)), ``sweeps`` (kind -> measured (bytes, GB/s)),
    ``ceiling_gbs``/``ceiling_label``."""
    fig = Figure(figsize=(9, 5.5))
    fig.subplots_adjust(left=0.1, right=0.97, top=0.92, bottom=0.11)
    if not d["points"]:
        return message(fig, "bus bandwidth", "no collective with a known size was matched")
    ax = fig.add_subplot()
    log_axes(ax)
    kinds = sorted(set(d["points"]) | set(d["sweeps"]))
    color = {k: KIND_COLORS[i % len(KIND_COLORS)] for i, k in enumerate(kinds)}
    for k, (x, y) in d["points"].items():
        ax.scatter(np.asarray(x), np.asarray(y), s=18, color=color[k], label=f"{k} (trace)")
    for k, (x, y) in d["sweeps"].items():
        ax.plot(x, y, color=color[k], lw=1.2, ls="--", marker=".", label=f"{k} (measured sweep)")
    if d["ceiling_gbs"]:
        ax.axhline(d["ceiling_gbs"], color="0.2", lw=1, ls=":")
        ax.text(ax.get_xlim()[0], d["ceiling_gbs"], f" {d['ceiling_label']} "
                f"{d['ceiling_gbs']:.3g} GB/s", va="bottom", fontsize=8)  # fmt: skip
    ax.set_xlabel("message size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("Collectives: bus bandwidth vs message size")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return png(fig)


MARK_COLORS = {"compute": "#d9412b", "input": "#8e5ac8", "node": "#2e9e5b"}


def heatmap(d: dict[str, Any]) -> bytes:
    """``matrix`` (rows: ``rows`` ranks, columns: ``cols``), ``title``, ``xlabel``, ``unit``,
    ``diverging`` (centred on 0), ``marks`` (rank -> finding kind: ticked on the left),
    ``absent`` (rank -> damaged | missing: a grey row, ticked)."""
    ranks = d["rows"]
    fig = Figure(figsize=(11, 7))
    fig.subplots_adjust(left=0.13, right=0.93, top=0.93, bottom=0.1)
    if not ranks:
        return message(fig, d["title"], "no ranks")
    m = np.ma.masked_invalid(np.asarray(d["matrix"], dtype=float))
    ax = fig.add_subplot()
    finite = m.compressed()
    if d["diverging"]:
        lim = float(np.percentile(np.abs(finite), 99.5)) if finite.size else 1.0
        lim = max(lim, float(np.abs(finite).max()) if finite.size else 1.0, 1e-9)
        cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad=ABSENT_COLOR)
        im = ax.imshow(m, aspect="auto", cmap=cmap, vmin=-lim, vmax=lim,
                       interpolation="nearest")  # fmt: skip
    else:
        cmap = matplotlib.colormaps["magma_r"].with_extremes(bad=ABSENT_COLOR)
        im = ax.imshow(m, aspect="auto", cmap=cmap, interpolation="nearest")
    cols = d["cols"]
    step = max(1, len(cols) // 20)
    ax.set_xticks(range(0, len(cols), step), cols[::step])
    marks = {int(r): k for r, k in d["marks"].items()}
    absent = {int(r): k for r, k in d.get("absent", {}).items()}
    row = {r: i for i, r in enumerate(ranks)}
    ticks = sorted({0, len(ranks) - 1} | {row[r] for r in [*marks, *absent] if r in row})
    names = [f"rank {ranks[i]}" + (f" ({absent[ranks[i]]})" if ranks[i] in absent else "")
             for i in ticks]  # fmt: skip
    ax.set_yticks(ticks, names, fontsize=7)
    for label, i in zip(ax.get_yticklabels(), ticks, strict=True):
        kind = marks.get(ranks[i])
        if kind:
            label.set_color(MARK_COLORS.get(kind, "black"))
            label.set_fontweight("bold")
    ax.set_xlabel(d["xlabel"])
    ax.set_ylabel(f"{len(ranks)} ranks (named ranks ticked; grey: absent)")
    ax.set_title(plain(d["title"]), fontsize=10)
    fig.colorbar(im, ax=ax, label=d["unit"], fraction=0.04)
    return png(fig)

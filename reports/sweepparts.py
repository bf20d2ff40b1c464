"""Pieces the sweep's HTML and plots share (``reports/sweep.py``, and the generate sweep's
``reports/sweepgen.py``): matplotlib in Agg mode, a PNG written atomically, a table cell,
an HTML table, a plot as a ``<figure>``."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.io import atomic_write_bytes
from tracekit.sweep.analysis import memory_unit as shown_unit


def plt_module() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt_module().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def cell(v: Any, kind: str = "", scale: float = 2**30) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if kind == "gib":
        return f"{float(v) / scale:.2f}"
    if kind == "pct":
        return f"{float(v):+.1f}" if kind == "pct" else str(v)
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return html.escape(str(v))


def memory_unit(df: pd.DataFrame, cols: list[tuple[str, str, str]]) -> tuple[str, float]:
    """The unit a table's memory columns ("gib") are shown in
    (:func:`tracekit.sweep.analysis.memory_unit` of their values)."""
    return shown_unit([float(v) for c, _, k in cols if k == "gib" for v in df[c]])


def table_html(df: pd.DataFrame, cols: list[tuple[str, str, str]]) -> str:
    """``cols`` (column, title, kind) as an HTML table; a memory column ("gib") with no
    value in any row (not measured: a CPU run's allocator figures) is left out."""
    cols = [(c, t, k) for c, t, k in cols if k != "gib" or (c in df and df[c].notna().any())]
    unit, scale = memory_unit(df, cols)
    head = "".join(f"<th>{html.escape(t.replace('GiB', unit))}</th>" for _, t, _ in cols)
    body = []
    for _, r in df.iterrows():
        cells = "".join(f"<td>{cell(r.get(c), k, scale)}</td>" for c, _, k in cols)
        body.append(f"<tr>{cells}</tr>")
    return f"<table class='sweep'><tr>{head}</tr>{''.join(body)}</table>"


def figures(names: tuple[str, ...], plots: dict[str, Path], inline: bool) -> list[str]:
    """The drawn plots of ``names`` as ``<figure>``s, then a note naming those not drawn."""
    parts = [figure(name, plots[name], inline) for name in names if name in plots]
    missing = [n for n in names if n not in plots]
    if missing:
        parts.append(
            "<p class='note'>Not drawn (no data for them): "
            + ", ".join(m.replace("_", " ") for m in missing)
            + ".</p>"
        )
    return parts


def figure(name: str, path: Path, inline: bool) -> str:
    """A plot as a ``<figure>``: the PNG's file name, or inlined as a data URI."""
    src = (
        "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        if inline
        else path.name
    )
    return (
        f"<figure><img src='{src}' alt='{name}'><figcaption>"
        f"{name.replace('_', ' ')}</figcaption></figure>"
    )

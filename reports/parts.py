"""Table and image pieces every renderer shares: HTML escaping, an inline PNG, an HTML
table of a frame's columns (``reports/html.py``, ``compare.py``, ``ranks.py``), a rich table
with tracekit's column kinds (``reports/terminal.py``, ``compare.py``, ``ranks.py``). A
module of its own so that a section renderer need not import the page that includes it."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from rich import box
from rich.table import Table


def esc(v: Any) -> str:
    """Text for HTML: every ``<``, ``>``, ``&``, ``"`` and ``'`` escaped."""
    return html.escape("" if v is None else str(v), quote=True)


def img(png: bytes, alt: str) -> str:
    b64 = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{b64}" alt="{esc(alt)}">'


Col = tuple[str, str, Callable[[Any], str]]  # header, css class, formatter (returns text)


def html_table(df: pd.DataFrame, cols: Iterable[Col], fields: Iterable[str], cls: str = "") -> str:
    cols = list(cols)
    fields = list(fields)
    head = "".join(f'<th class="{c}">{esc(h)}</th>' for h, c, _ in cols)
    rows = []
    for rec in df.to_dict("records"):
        cells = "".join(
            f'<td class="{c}">{esc(f(rec.get(k)))}</td>'
            for (_, c, f), k in zip(cols, fields, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def rich_table(title: str, cols: Iterable[tuple[str, str]], gap: int = 2) -> Table:
    t = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, gap - 1, 0, 1),
        show_edge=False,
        expand=False,
    )
    for name, justify in cols:
        if justify == "name":
            # the only column rich may narrow (wrapable); its cells cut themselves
            t.add_column(name, justify="left", overflow="ellipsis", min_width=12)
        elif justify == "short":
            t.add_column(name, justify="left", no_wrap=True, max_width=11, overflow="ellipsis")
        else:
            t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return t

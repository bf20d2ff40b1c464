"""Markdown tables of the report, for TensorBoard's TEXT tab.

TensorBoard renders text summaries as Markdown and sanitises the HTML; trace strings are
escaped here anyway so that a ``|`` in a kernel name cannot split a table cell and a
``<tag>`` shows as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd

import tracekit.reports.fmt as fmt
import tracekit.reports.generate as GR
import tracekit.reports.verdict as VR
from tracekit.summary import Summary

_MD = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def esc(v: Any) -> str:
    """Text for a Markdown table cell: HTML-escaped, Markdown punctuation backslashed, on
    one line."""
    s = "" if v is None else str(v)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD.sub(r"\\\1", s)
    return " ".join(s.split())


Col = tuple[str, str, Callable[[Any], str]]  # header, field, formatter


def table(df: pd.DataFrame, cols: Iterable[Col]) -> str:
    cols = list(cols)
    lines = [
        "| " + " | ".join(esc(h) for h, _, _ in cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
    ]
    for rec in df.to_dict("records"):
        lines.append("| " + " | ".join(esc(f(rec.get(k))) for _, k, f in cols) + " |")
    return "\n".join(lines)


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def summary(sm: Summary) -> str:
    h = sm.header
    rows = [
        ("verdict", VR.verdict_line(sm)),
        *VR.figures(sm),
        ("device", h.device or sm.roofs.device or "unknown"),
        ("PyTorch", h.torch_version or "unknown"),
        ("steps analysed", ", ".join(str(s) for s in h.steps[:20])),
        ("step time (trace)", fmt.ms(h.step_time_ms)),
        ("step time (measured)", fmt.ms(h.measured_step_time_ms)),
        *(
            [
                ("GPU idle", fmt.pct(sm.launch.gpu_idle_pct)),
                ("GPU idle (unprofiled step)", fmt.pct(sm.launch.gpu_idle_unprofiled_pct)),
                ("launch-bound", "yes" if sm.launch.launch_bound else "no"),
            ]
            if sm.cpu is None
            else [
                ("operators busy", fmt.pct(sm.cpu.busy_pct)),
                ("framework overhead", fmt.pct(sm.cpu.overhead_pct)),
            ]
        ),
    ]
    if h.config:
        rows.insert(1, ("config", ", ".join(f"{k}={v}" for k, v in h.config.items())))
    if sm.memory:
        rows.append(("peak allocated", fmt.nbytes(sm.memory.peak_allocated_bytes)))
        rows.append(("peak reserved", fmt.nbytes(sm.memory.peak_reserved_bytes)))
    for k, v in sm.bound.items():
        rows.append((f"{k} {fmt.words(sm).time}", fmt.pct(v)))
    df = pd.DataFrame(rows, columns=["key", "value"])
    out = [table(df, [("", "key", _s), ("", "value", _s)])]
    if sm.verdict is not None:
        out += [f"* evidence: {esc(e)}" for e in sm.verdict.evidence]
        if sm.verdict.lever:
            out.append(f"* next lever: {esc(sm.verdict.lever)}")
    out += [f"* missing: {esc(m)}" for m in h.missing]
    out += [f"* **warning**: {esc(w)}" for w in sm.warnings]
    return "\n".join(out)


def classes(sm: Summary) -> str:
    return table(
        sm.classes,
        [
            ("class", "class", _s),
            ("ms/step", "ms_per_step", fmt.ms),
            (fmt.words(sm).time, "time_share_pct", fmt.pct),
            ("FLOPs", "flop_share_pct", fmt.pct),
            ("memory-bound", "memory_bound_pct", fmt.pct),
            ("compute-bound", "compute_bound_pct", fmt.pct),
        ],
    )


def operators(sm: Summary, n: int = 25) -> str:
    body = table(
        sm.operators.head(n),
        [
            ("operator", "name", _s),
            ("class", "class", _s),
            ("shapes", "input_dims", _s),
            ("ms/step", "ms_per_step", fmt.ms),
            (fmt.words(sm).time, "time_share_pct", fmt.pct),
            ("FLOP/byte", "intensity", fmt.intensity),
            ("attained", "attained_flops", lambda v: fmt.si(v, "FLOP/s")),
            ("bandwidth", "attained_bw", lambda v: fmt.si(v, "B/s")),
            ("bound", "bound", _s),
            ("% of roof", "roof_pct", fmt.pct),
            ("source", "source", _s),
        ],
    )
    return body + (f"\n\nnote: {sm.roof_note}" if sm.roof_note else "")


def kernels(sm: Summary, n: int = 20) -> str:
    return table(
        sm.kernels.head(n),
        [
            (fmt.words(sm).kernel, "name", _s),
            ("class", "class", _s),
            ("calls", "calls", fmt.count),
            ("ms/step", "ms_per_step", fmt.ms),
            (fmt.words(sm).time, "time_share_pct", fmt.pct),
        ],
    )


def allocators(sm: Summary) -> str:
    if not len(sm.allocators):
        return "no allocation events"
    return table(
        sm.allocators,
        [
            ("operator", "op_name", _s),
            ("allocations", "allocations", fmt.count),
            ("bytes/step", "bytes_per_step", fmt.nbytes),
            ("largest", "largest_bytes", fmt.nbytes),
            ("share", "pct", fmt.pct),
        ],
    )


def generate(sm: Summary) -> str:
    """A generate run's figures, decode steps and decode GEMMs."""
    g = sm.generate
    if g is None:
        return ""
    rows = pd.DataFrame(GR.lines(sm), columns=["key", "value"])
    return "\n\n".join(
        [
            f"**{esc(GR.title(g))}**",
            table(rows, [("", "key", _s), ("", "value", _s)]),
            table(g.per_step, [(h, k, f) for h, _, k, f in GR.STEP_COLUMNS]),
            table(GR.gemm_rows(g), [(h, k, f) for h, _, k, f in GR.GEMM_COLUMNS_OUT]),
        ]
    )


def all_tables(sm: Summary) -> dict[str, str]:
    out = {
        "summary": summary(sm),
        "classes": classes(sm),
        "operators": operators(sm),
        "kernels": kernels(sm),
        "allocators": allocators(sm),
    }
    if sm.generate is not None:
        out["generate"] = generate(sm)
    return out

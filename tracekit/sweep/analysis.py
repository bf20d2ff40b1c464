"""A sweep's analysis, computed once: its rows completed, the scaling fits, the findings,
the largest configuration that fits (training), the crossover and capacity wall per line
(generate), and the rows grouped into the lines the plots draw. Pure: a table in, frames
out; ``reports/sweep.py`` and ``reports/sweepgen.py`` only draw and lay out what they get,
and the CLI's table (:func:`tracekit.sweep.describe`) prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.classify.families.registry import CLASSES
from tracekit.classify.models.memory import CATEGORIES
from tracekit.sweep.decode import (
    CapacityWall,
    Crossover,
    capacity_wall,
    generate_findings,
    generate_fits,
    generating,
    line_groups,
    measured_crossover,
    prepared,
    walls_table,
)
from tracekit.sweep.findings import findings
from tracekit.sweep.fit import fit_table, largest_fitting, lines
from tracekit.sweep.rows import complete

SHARE_MIN_PCT = 1.0  # a class's share of device time that a time-share plot draws


@dataclass(frozen=True)
class Line:
    """Rows that differ only along one axis (``fixed``: the other columns' values); a
    generate sweep's line along the batch has its crossover, along the context its
    capacity wall."""

    fixed: dict[str, Any]
    rows: pd.DataFrame
    crossover: Crossover | None = None
    wall: CapacityWall | None = None


@dataclass
class SweepAnalysis:
    table: pd.DataFrame  # one row per configuration, completed
    generate: bool
    fits: pd.DataFrame
    findings: list[str]
    largest: pd.DataFrame  # training: the largest configuration that fits
    walls: pd.DataFrame  # generate: crossover and capacity wall per line
    lines: dict[str, list[Line]] = field(default_factory=dict)  # per axis, ok rows
    decode_lines: dict[str, list[Line]] = field(default_factory=dict)  # generate: all rows
    share_lines: list[Line] = field(default_factory=list)  # training: class shares vs seq
    categories: bool = False  # training: measured memory categories to stack


def memory_unit(values: list[float]) -> tuple[str, float]:
    """The unit memory figures are shown in: GiB, or MiB / KiB where the largest is smaller
    (a CPU sweep's few MiB would read 0.00 GiB)."""
    top = max((abs(v) for v in values if v == v), default=0.0)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if top >= scale:
            return unit, scale
    return "KiB", 2**10


def _share_lines(table: pd.DataFrame) -> list[Line]:
    """Lines along seq where some class holds >= SHARE_MIN_PCT of device time (none on a
    CPU sweep, or where the classify stage filled no shares)."""
    cols = [f"time_share_{c}_pct" for c in CLASSES]
    if not set(cols) <= set(table.columns):
        return []
    return [
        Line(f, g)
        for f, g in lines(table, "seq")
        if (g[cols].fillna(0) >= SHARE_MIN_PCT).any().any()
    ]


def _ok_lines(t: pd.DataFrame) -> dict[str, list[Line]]:
    """The ok rows' lines along the batch and the sequence (the plots', TensorBoard's)."""
    return {a: [Line(f, g) for f, g in lines(t, a)] for a in ("batch", "seq")}


def _generate(table: pd.DataFrame) -> SweepAnalysis:
    t = prepared(table)

    def ok(g: pd.DataFrame) -> pd.DataFrame:
        rows: pd.DataFrame = g[g["status"] == "ok"]
        return rows

    by_batch = [
        Line(f, g, crossover=measured_crossover(ok(g)) if len(ok(g)) >= 2 else None)
        for f, g in line_groups(t, "batch")
    ]
    by_seq = [
        Line(f, g, wall=capacity_wall(g, "seq") if len(ok(g)) else None)
        for f, g in line_groups(t, "seq")
    ]
    return SweepAnalysis(
        table=t, generate=True, fits=generate_fits(t), findings=generate_findings(t),
        largest=pd.DataFrame(), walls=walls_table(t), lines=_ok_lines(t),
        decode_lines={"batch": by_batch, "seq": by_seq},
    )  # fmt: skip


def analyse_sweep(table: pd.DataFrame) -> SweepAnalysis:
    """Everything the sweep's report, files and terminal table say about ``table``."""
    t = complete(table)
    if generating(t):
        return _generate(t)
    fits = fit_table(t)
    mem = [f"mem_{c}_bytes" for c in CATEGORIES]
    return SweepAnalysis(
        table=t, generate=False, fits=fits, findings=findings(t, fits),
        largest=largest_fitting(t), walls=pd.DataFrame(),
        lines=_ok_lines(t),
        share_lines=_share_lines(t),
        categories=set(mem) <= set(t.columns) and not t[mem].isna().all().all(),
    )  # fmt: skip

"""``tracekit sweep``: collect every configuration, analyse the table, then render.

The collects and the table are :func:`tracekit.sweep.run_sweep`'s, the analysis (fits,
findings, ``fits.csv``) :func:`tracekit.sweep.finish`'s, and the HTML section and
TensorBoard scalars :mod:`tracekit.reports.sweep`'s, drawn from that analysis.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracekit.reports.sweep import write_html, write_tensorboard
from tracekit.sweep import SweepOutputs, SweepPlan, finish, run_sweep


def report_sweep(table: pd.DataFrame, out: Path) -> SweepOutputs:
    """The analysis of a sweep's ``table`` and its files in ``out``: ``fits.csv``,
    ``findings.txt``, ``report/`` (HTML, plots) and ``tensorboard/``."""
    outs = finish(table, out)
    outs.html = write_html(outs.analysis, out / "report")
    write_tensorboard(outs.analysis, out / "tensorboard")
    outs.tensorboard = out / "tensorboard"
    return outs


def sweep(
    plan: SweepPlan, out: Path, *, resume: bool = False, quiet: bool = False
) -> tuple[pd.DataFrame, SweepOutputs]:
    """Run ``plan`` into ``out`` (one collect per configuration), then :func:`report_sweep`."""
    table = run_sweep(plan, out, resume=resume, quiet=quiet)
    return table, report_sweep(table, out)

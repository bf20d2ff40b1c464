"""Rendering: terminal, HTML, plots, TensorBoard (``tracekit report``, ``compare``, ``sweep``,
``advise``).

Analysis that is not rendering lives in the stages before this one; the commands that run
them and hand their result here are :mod:`tracekit.commands`. This package only turns what
it is handed (a :class:`tracekit.summary.Summary`, a comparison, a sweep's analysis, advise's
table) into text, HTML, PNG, Parquet and TensorBoard events.
"""

from __future__ import annotations

# (not ``render``: the name is its module's, ``import tracekit.reports.render as R``)
from tracekit.reports.render import ReportResult, summary_text

__all__ = ["ReportResult", "summary_text"]

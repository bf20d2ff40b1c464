"""Rendering: terminal, HTML, plots, TensorBoard (``tracekit report``).

Analysis that is not rendering lives in :mod:`tracekit.summary`; this package only turns a
:class:`tracekit.summary.Summary` into text, HTML, PNG, Parquet and TensorBoard events.
"""

from __future__ import annotations

from tracekit.reports.run import ReportResult, default_out, report, summary_text

__all__ = ["ReportResult", "default_out", "report", "summary_text"]

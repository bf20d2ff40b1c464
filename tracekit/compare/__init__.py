"""``tracekit compare A B``: what changed between two runs, per analysed step.

Pure analysis (frames in, frames out) on top of :mod:`tracekit.summary`; rendering lives
in ``tracekit.reports.compare``.
"""

from __future__ import annotations

from tracekit.compare.build import (
    COMPARE_FORMAT,
    COMPARE_VERSION,
    METRICS,
    Comparison,
    compare,
    compare_json,
)

__all__ = ["COMPARE_FORMAT", "COMPARE_VERSION", "METRICS", "Comparison", "compare", "compare_json"]

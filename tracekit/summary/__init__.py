"""Analysis for the report stage that is not rendering: time, FLOP and roofline shares per
class, operator and kernel; step times and GPU idle share; memory statistics; and the
assembly of ``summary.json``. Pure functions, frames in, frames out; no plotting here.
"""

from __future__ import annotations

from tracekit.summary.build import (
    SUMMARY_FORMAT,
    SUMMARY_VERSION,
    Header,
    Summary,
    TraceFacts,
    summarize,
    summary_json,
    trace_facts,
)
from tracekit.summary.roofs import Roofs, roofs_from

__all__ = [
    "SUMMARY_FORMAT",
    "SUMMARY_VERSION",
    "Header",
    "Roofs",
    "Summary",
    "TraceFacts",
    "roofs_from",
    "summarize",
    "summary_json",
    "trace_facts",
]

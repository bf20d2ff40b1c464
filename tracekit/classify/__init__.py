"""Roofline classification: every kernel and operator classed, costed and placed as
memory- or compute-bound on the device roofline (by model and, with Nsight Compute
counters, by measurement). Pure functions over the parsed tables; no torch import.
"""

from __future__ import annotations

from tracekit.classify.classes import classify_kernel_name, classify_kernels
from tracekit.classify.costs import op_cost
from tracekit.classify.counters import join_counters
from tracekit.classify.devices import SPECS, Roofline, pipe_for, resolve_roofline
from tracekit.classify.families.inputs import Cost
from tracekit.classify.families.registry import CLASSES, RULES
from tracekit.classify.ncu import ncu_command, ncu_metrics, read_ncu_csv
from tracekit.classify.output import write_classification
from tracekit.classify.result import Classification
from tracekit.classify.roofline import classify

__all__ = [
    "CLASSES",
    "RULES",
    "SPECS",
    "Classification",
    "Cost",
    "Roofline",
    "classify",
    "classify_kernel_name",
    "classify_kernels",
    "join_counters",
    "ncu_command",
    "ncu_metrics",
    "op_cost",
    "pipe_for",
    "read_ncu_csv",
    "resolve_roofline",
    "write_classification",
]

"""Roofline classification: every kernel and operator classed, costed and placed as
memory- or compute-bound on the device roofline (by model and, with Nsight Compute
counters, by measurement). Pure functions over the parsed tables; no torch import.
"""

from __future__ import annotations

from tracekit.classify.classes import CLASSES, RULES, classify_kernel_name, classify_kernels
from tracekit.classify.devices import SPECS, Roofline, pipe_for, resolve_roofline
from tracekit.classify.flops import Cost, op_cost

__all__ = [
    "CLASSES",
    "RULES",
    "SPECS",
    "Cost",
    "Roofline",
    "classify_kernel_name",
    "classify_kernels",
    "op_cost",
    "pipe_for",
    "resolve_roofline",
]

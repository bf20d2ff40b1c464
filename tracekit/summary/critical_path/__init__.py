"""The critical-path engine (docs/critical-path.md): each analysed step's dependency graph,
its longest path as a steady-state loop of identical steps, and what-ifs on it.

Modules, in the order they build on each other:

* :mod:`~tracekit.summary.critical_path.graph` -- a graph of time points on chains and its
  longest path; knows nothing about traces (and the multi-rank hooks);
* :mod:`~tracekit.summary.critical_path.tables` -- the trace's columns the builder reads,
  prepared once per trace, and the launch model's constants measured on it;
* :mod:`~tracekit.summary.critical_path.build` -- one step's calibrated dependency graph;
* :mod:`~tracekit.summary.critical_path.analysis` -- :func:`analyse` (the path per step, per
  class, off-path time), the what-if :class:`Scenario` builders and :func:`predict`;
* :mod:`~tracekit.summary.critical_path.anchor` -- the what-ifs moved onto the unprofiled
  step (import it as a module: ``import tracekit.summary.critical_path.anchor as CPA``).

The names below are the analysis's, for ``import tracekit.summary.critical_path as CP``.
"""

from __future__ import annotations

from tracekit.summary.critical_path.analysis import (
    GROUPS,
    CriticalPath,
    Scenario,
    analyse,
    calibrate_host,
    class_speedup,
    cuda_graphs,
    for_report,
    fuse,
    gpu_free,
    host_speedup,
    launch_free,
    predict,
    solve_step,
    summary_block,
    then,
)

__all__ = [
    "GROUPS",
    "CriticalPath",
    "Scenario",
    "analyse",
    "calibrate_host",
    "class_speedup",
    "cuda_graphs",
    "for_report",
    "fuse",
    "gpu_free",
    "host_speedup",
    "launch_free",
    "predict",
    "solve_step",
    "summary_block",
    "then",
]

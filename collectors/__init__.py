"""Workloads run under the profiler (the only part of tracekit that imports torch).

The names below are imported on first use (PEP 562), so that importing one torch-free
submodule (:mod:`~tracekit.collectors.config`, which validates ``collect``'s flags) does
not import torch through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.collectors.config import CollectConfig
    from tracekit.collectors.distributed import collect as collect_run
    from tracekit.collectors.profiler import Profiler
    from tracekit.collectors.profiler_config import ProfilerConfig
    from tracekit.collectors.runsummary import summary

__all__ = ["CollectConfig", "Profiler", "ProfilerConfig", "collect_run", "summary"]

_WHERE = {  # name -> (submodule, its name there)
    "CollectConfig": ("config", "CollectConfig"),
    "Profiler": ("profiler", "Profiler"),
    "ProfilerConfig": ("profiler_config", "ProfilerConfig"),
    "collect_run": ("distributed", "collect"),
    "summary": ("runsummary", "summary"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _WHERE[name]
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value

"""Workloads run under the profiler (the only part of tracekit that imports torch)."""

from __future__ import annotations

from tracekit.collectors.config import CollectConfig
from tracekit.collectors.profiler import Profiler, ProfilerConfig
from tracekit.collectors.run import collect as collect_run
from tracekit.collectors.run import summary

__all__ = ["CollectConfig", "Profiler", "ProfilerConfig", "collect_run", "summary"]

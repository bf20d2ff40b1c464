"""Workloads run under the profiler (the only part of tracekit that imports torch)."""

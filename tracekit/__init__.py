"""tracekit: profiler-trace analysis for PyTorch GPU training."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.errors import TraceError, TracekitError, UsageError

__all__ = ["TraceError", "TracekitError", "UsageError", "__version__", "load"]


def load(path: str):  # type: ignore[no-untyped-def]
    """Parse a trace (or run folder) and return a :class:`tracekit.parse.Trace`."""
    from tracekit.parse import load as _load

    return _load(path)

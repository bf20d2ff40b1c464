"""tracekit: profiler-trace analysis for PyTorch GPU training."""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from tracekit.errors import TraceError, TracekitError, UsageError

if TYPE_CHECKING:  # torch is imported only when profile() is used (tracekit parse never)
    from tracekit.collectors.api import Profile, profile

__all__ = ["Profile", "TraceError", "TracekitError", "UsageError", "__version__", "load", "profile"]


def load(path: str):  # type: ignore[no-untyped-def]
    """Parse a trace (or run folder) and return a :class:`tracekit.parse.Trace`."""
    from tracekit.parse import load as _load

    return _load(path)


def __getattr__(name: str) -> Any:
    # tracekit.profile / tracekit.Profile (tracekit.collectors.api), imported on first use
    if name in ("profile", "Profile"):
        from tracekit.collectors import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")

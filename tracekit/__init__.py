"""tracekit: profiler-trace analysis for PyTorch GPU training."""

from __future__ import annotations

from typing import Any

from tracekit.errors import TraceError, TracekitError, UsageError
from tracekit.version import __version__ as __version__

__all__ = ["Profile", "TraceError", "TracekitError", "UsageError", "__version__", "load", "profile"]


def load(path: str):  # type: ignore[no-untyped-def]
    """Parse a trace (or run folder) and return a :class:`tracekit.parse.Trace`."""
    from tracekit.parse import load as _load

    return _load(path)


def __getattr__(name: str) -> Any:
    # tracekit.profile / tracekit.Profile: tracekit.collectors.api's (typed there), imported
    # on first use, so that `import tracekit` (and tracekit parse) never imports torch; not
    # imported here even for type checkers, as collectors import tracekit (an import cycle)
    if name in ("profile", "Profile"):
        from tracekit.collectors import api

        return getattr(api, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")

"""tracekit's small exception hierarchy.

Every error a user can cause is a :class:`TracekitError` with a one-line
message; the CLI prints ``tracekit: error: <message>`` and exits with the
error's ``exit_code``. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class TracekitError(Exception):
    """Base class: a problem with the user's input, options or environment."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # One line, always: the CLI prints it as is.
        super().__init__(" ".join(str(message).split()))


class TraceError(TracekitError):
    """The trace file cannot be read as a PyTorch profiler trace."""


class UsageError(TracekitError):
    """An option or argument is invalid."""


class DeviceError(TracekitError):
    """The requested device is absent or unusable (e.g. CUDA asked for, none present)."""


class OutOfMemoryError(TracekitError):
    """The workload ran out of device memory; the run folder records status 'oom'."""

    exit_code = 3

"""A time limit for tests that start runs which could hang (gloo ranks, subprocesses)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """A hung run fails the test instead of blocking the suite (SIGALRM)."""

    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError(f"the run was still going after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

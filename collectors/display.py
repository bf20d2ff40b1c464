"""The rich progress display of a collecting run on a terminal (silent otherwise), shared by
the single-process run (``collectors/collect.py``) and the multi-GPU launcher and ranks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class Display:
    """A rich progress display on a terminal; silent otherwise or when ``quiet``."""

    def __init__(self, quiet: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal
        self._progress: Any = None
        self._task: Any = None

    @contextlib.contextmanager
    def running(self) -> Iterator[Display]:
        if not self.enabled:
            yield self
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as progress:
            self._progress = progress
            try:
                yield self
            finally:
                self._progress = None

    def phase(self, description: str, total: int | None = None) -> None:
        if self._progress is None:
            return
        if self._task is not None:
            self._progress.update(self._task, visible=False)
        self._task = self._progress.add_task(description, total=total)

    def advance(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def note(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=text)

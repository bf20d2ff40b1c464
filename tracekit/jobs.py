"""A folder of one job's rank traces (:func:`tracekit.ranks.discover.discover`): the rank
analysed in detail through the pipeline (:mod:`tracekit.analyse`) and the multi-rank
analysis of every rank (:func:`tracekit.ranks.mapreduce.analyse_ranks`). It sits after the ranks
stage; ``report`` and ``compare`` take a run folder through it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.analyse import load_run
from tracekit.errors import TraceError, UsageError
from tracekit.parse import Trace
from tracekit.ranks.discover import discover
from tracekit.ranks.mapreduce import analyse_ranks


@dataclass
class Job:
    """A multi-rank folder being analysed (``report``, ``compare``): its ranks, the rank
    analysed in detail, and (after :meth:`analyse`) the multi-rank summary."""

    ranks: Any  # tracekit.ranks.discover.RankSet
    rank: int
    scheduler: str | None
    workers: int | None
    summary: Any = None
    chosen: bool = False  # --rank given: no other rank stands in for a damaged one

    @property
    def trace(self) -> Path:
        return Path(self.ranks.traces[self.rank].path)

    def describe(self) -> str:
        backend = f", {self.ranks.backend}" if self.ranks.backend else ""
        return f"{len(self.ranks.traces)} ranks{backend}"

    def load(self) -> Trace:
        """The detailed rank's trace; a damaged default rank gives way to the next."""
        order = [r for r in self.ranks.ranks if r >= self.rank and not self.chosen]
        for r in order or [self.rank]:
            try:
                t = load_run(self.ranks.traces[r].path, cpu=False)
            except TraceError:
                if self.chosen or r == (order or [self.rank])[-1]:
                    raise
                continue
            self.rank = r
            break
        t.manifest, t.run_dir = self.ranks.manifest, Path(self.ranks.folder)
        return t

    def analyse(self, cache: Path) -> None:
        """The multi-rank analysis of every rank (per-rank results cached in ``cache``)."""
        self.summary = analyse_ranks(
            self.ranks, cache, scheduler=self.scheduler, workers=self.workers
        )


def job_of(path: Path, rank: int | None, scheduler: str | None, workers: int | None) -> Job | None:
    """The multi-rank job in ``path``, or None for a single trace (then the multi-rank
    options must not be given)."""
    ranks = discover(path) if path.is_dir() else None
    if ranks is None:
        for name, v in (("--rank", rank), ("--scheduler", scheduler), ("--workers", workers)):
            if v is not None:
                raise UsageError(f"{name} is for a folder of several ranks' traces")
        return None
    if rank is not None and rank not in ranks.traces:
        raise UsageError(f"--rank {rank}: no trace of that rank (ranks {ranks.ranks})")
    chosen = rank is not None
    return Job(ranks, rank if rank is not None else min(ranks.traces), scheduler, workers,
               chosen=chosen)  # fmt: skip

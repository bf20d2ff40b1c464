"""Analyse every rank of a job: the per-rank work over every trace, then the reduction.

:func:`map_ranks` is the one place that decides where the per-rank work runs: the ranks
engine (``tracekit.ranks.engine``: a bounded local process pool, or a Dask cluster with
``scheduler``) where it is installed, else a plain loop in this process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracekit.errors import UsageError
from tracekit.io import atomic_dir
from tracekit.ranks import perrank
from tracekit.ranks.discover import RankSet
from tracekit.ranks.reduce import RanksSummary, reduce

PerRank = Callable[[Path, Path], Any]


def _engine() -> Any:
    try:
        return importlib.import_module("tracekit.ranks.engine")
    except ImportError:
        return None


def map_ranks(
    fn: PerRank,
    inputs: Mapping[int, Path],
    out_dir: Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
) -> dict[int, Path]:
    """Run ``fn(trace, folder)`` for every ``rank: trace`` into ``out_dir/rank<R>/``;
    returns rank -> folder."""
    engine = _engine()
    if engine is not None:
        got = engine.map_ranks(
            fn, inputs, out_dir, scheduler=scheduler, workers=workers, version=perrank.VERSION
        )
        return {int(r.rank): Path(r.out) for r in got}
    if scheduler is not None:
        raise UsageError("--scheduler needs tracekit's ranks engine (tracekit.ranks.engine)")
    out: dict[int, Path] = {}
    for rank, trace in sorted(inputs.items()):
        final = Path(out_dir) / f"rank{rank}"
        with atomic_dir(final) as tmp:
            fn(Path(trace), tmp)
        out[rank] = final
    return out


def analyse_ranks(
    ranks: RankSet,
    out_dir: Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
) -> RanksSummary:
    """Every rank of ``ranks`` analysed into ``out_dir`` and reduced."""
    dirs = map_ranks(perrank.analyse, ranks.inputs(), out_dir, scheduler=scheduler, workers=workers)
    return reduce(
        dirs,
        world_size=ranks.world_size,
        backend=ranks.backend,
        hosts={r: t.host for r, t in ranks.traces.items()},
        manifest=ranks.manifest,
        notes=ranks.notes,
    )

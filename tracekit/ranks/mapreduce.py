"""Analyse every rank of a job: the per-rank work (:func:`tracekit.ranks.perrank.analyse`)
over every trace on the ranks engine (:func:`tracekit.ranks.engine.map_ranks`: a bounded
local process pool, or a Dask cluster with ``scheduler``), then the reduction
(:func:`tracekit.ranks.reduce.reduce`) over the per-rank results it leaves on disk.

A damaged rank (a truncated or corrupt trace, a worker that died on it) costs only itself:
it is named in one line (:attr:`RanksSummary.damaged`) and the others are analysed; only
when no rank could be analysed is the first damage the error."""

from __future__ import annotations

import json
from pathlib import Path

from tracekit.errors import TraceError
from tracekit.ranks import perrank
from tracekit.ranks.discover import RankSet
from tracekit.ranks.engine import map_ranks
from tracekit.ranks.reduce import RanksSummary, reduce


def _check(ranks: RankSet, dirs: dict[int, Path]) -> None:
    """A trace whose full header names another rank than discovery read (its
    ``distributedInfo`` after the events, say) is refused."""
    for r, d in dirs.items():
        got = json.loads((d / perrank.RESULT).read_text()).get("rank")
        if isinstance(got, int) and got != r:
            raise TraceError(
                f"{ranks.traces[r].path}: taken as rank {r} ({ranks.traces[r].rank_from}), but "
                f"its distributedInfo says rank {got}"
            )


def analyse_ranks(
    ranks: RankSet,
    out_dir: Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
) -> RanksSummary:
    """Every rank of ``ranks`` analysed into ``out_dir/rank<R>/`` (cached: an unchanged
    trace is not analysed again) and reduced."""
    damaged: dict[int, str] = dict(ranks.damaged)
    results = map_ranks(
        perrank.analyse,
        ranks.inputs(),
        out_dir,
        scheduler=scheduler,
        workers=workers,
        version=perrank.VERSION,
        on_failure=damaged.__setitem__,
    )
    if not results:
        first = min(damaged)
        raise TraceError(f"no rank could be analysed: {damaged[first]}")
    dirs = {int(r.rank): Path(r.out) for r in results}
    _check(ranks, dirs)
    return reduce(
        dirs,
        world_size=ranks.world_size,
        backend=ranks.backend,
        hosts={r: t.host for r, t in ranks.traces.items()},
        manifest=ranks.manifest,
        notes=ranks.notes,
        damaged=damaged,
    )

"""Multi-rank analysis at scale: a per-rank function over every rank trace, each rank in
its own bounded worker (a local process pool, or a Dask cluster), then a reduction over the
small per-rank results. The engine: :mod:`tracekit.ranks.engine`; docs/ranks-at-scale.md.
The multi-rank analysis on it (docs/multi-gpu.md): :mod:`~tracekit.ranks.discover` (which
traces are a job's ranks), :mod:`~tracekit.ranks.perrank` (the per-rank function),
:mod:`~tracekit.ranks.collectives`, :mod:`~tracekit.ranks.reduce` (the cross-rank step),
:mod:`~tracekit.ranks.mapreduce` (both, over the engine).
"""

from __future__ import annotations

from tracekit.ranks.engine import (
    RankResult,
    cache_key,
    default_workers,
    map_ranks,
    read_table,
    worker_memory,
)

__all__ = [
    "RankResult",
    "cache_key",
    "default_workers",
    "map_ranks",
    "read_table",
    "worker_memory",
]

"""The single-trace analysis as a per-rank function for :func:`tracekit.ranks.map_ranks`.

``analyse_rank(trace, out)`` parses one rank's trace, classifies and summarises it as
``tracekit report`` does, and writes into ``out``:

* ``tables/`` — the parsed tables (``tracekit parse``'s Parquet files and ``meta.json``);
* ``summary.json`` — the rank's ``summary.json`` (docs/report.md);
* ``classes.parquet``, ``steps.parquet`` — its class and step tables;

and returns the small figures a cross-rank reduction starts from (:data:`VALUE_KEYS`).
Peak RSS on a 502 MB trace: 1.07 GB (``benchmarks/ranks_bench.py``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tracekit.io import atomic_write_json

# summary.json keys copied into the returned value
VALUE_KEYS = (
    "steps",
    "step_time_ms",
    "gpu_time_ms_per_step",
    "gpu_idle_pct",
    "time_share_pct",
    "ms_per_step",
)


def _plain(v: Any) -> Any:
    """JSON without NaN: a non-finite float becomes null."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def analyse_rank(trace: Path, out: Path) -> dict[str, Any]:
    """Parse, classify and summarise one rank's trace into ``out`` (see the module)."""
    from tracekit.analyse import analyse, parse_rank

    a = analyse(parse_rank(trace, out / "tables"))  # with the traffic estimate, as `report`
    t, sm = a.trace, a.summary
    assert sm is not None
    atomic_write_json(out / "summary.json", sm.summary)
    sm.classes.reset_index(drop=True).to_parquet(out / "classes.parquet", index=False)
    sm.step_table.reset_index(drop=True).to_parquet(out / "steps.parquet", index=False)
    info = t.meta.get("distributed_info") or {}
    value = {k: sm.summary.get(k) for k in VALUE_KEYS}
    value.update(
        distributed_rank=info.get("rank"),
        world_size=info.get("world_size"),
        kernels=int(t.meta["counts"]["kernels"]),
        events=int(t.meta["source"]["events"]),
    )
    return _plain(value)  # type: ignore[no-any-return]

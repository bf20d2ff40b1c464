"""The ``ranks`` block of ``summary.json`` (keys in docs/multi-gpu.md; stable: keys are only
ever added)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tracekit.ranks.reduce import RanksSummary
from tracekit.ranks.story import to_json as job_json

FORMAT = "tracekit.ranks"
VERSION = 1
TOP_COLLECTIVES = 50  # rows of the collectives table in summary.json (all: collectives.parquet)

PER_RANK_KEYS = (
    "rank", "host", "device", "trace", "steps", "step_time_ms", "gpu_busy_ms", "compute_ms",
    "comm_kernel_ms", "comm_kernel_sum_ms", "exposed_comm_ms", "overlapped_comm_ms",
    "gpu_idle_ms", "gpu_idle_pct", "exposed_comm_pct", "sync_wait_ms", "own_work_ms",
    "collectives_per_step", "last_arrivals", "peak_allocated_bytes", "peak_reserved_bytes",
    "clock_offset_ms", "unprofiled_step_ms", "with_sync_ms", "without_sync_ms", "comm_cost_ms",
    "comm_cost_pct", "timeline_source", "timeline_reason", "timeline_recorder",
)  # fmt: skip
STRAGGLER_KEYS = (
    "step", "slowest_rank", "step_time_ms", "median_ms", "lead_ms", "lead_pct",
    "most_work_rank", "own_work_ms", "own_work_lead_ms", "waited_on_rank",
)  # fmt: skip
COLLECTIVE_KEYS = (
    "pg", "kind", "dtype", "message_bytes", "group_size", "count", "per_step", "dur_mean_ms",
    "transfer_mean_ms", "wait_mean_ms", "wait_pct", "time_ms_per_step", "algbw_Bps",
    "busbw_Bps", "ceiling_Bps", "busbw_pct_of_ceiling", "measured_at_size_Bps",
    "ceiling_source", "last_rank",
)  # fmt: skip
SHARE_KEYS = ("class", "kernel_ms_per_step", "union_share_pct", "exposed_share_pct")


def clean(v: Any) -> Any:
    """JSON-safe: NaN, inf and pandas' NA -> None; numpy scalars -> Python."""
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if v is pd.NA or v is None:
        return None
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def records(df: pd.DataFrame, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    cols = [k for k in keys if k in df.columns]
    return [{k: r.get(k) for k in keys} for r in df[cols].to_dict("records")]


def ranks_json(s: RanksSummary) -> dict[str, Any]:
    """The ``ranks`` block."""
    coll = s.collectives
    doc: dict[str, Any] = clean(
        {
            "format": FORMAT,
            "version": VERSION,
            "world_size": s.world_size,
            "ranks": s.ranks,
            "missing_ranks": s.missing,
            "damaged_ranks": {str(r): why for r, why in sorted(s.damaged.items())},
            "backend": s.backend,
            "on": s.on,
            "detail_rank": s.detail_rank,
            "steps": s.steps,
            "clock": s.clock.to_json(),
            "exposed_comm_pct": s.exposed_comm_pct,
            "timeline": {"source": s.timeline_source, "words": s.timeline_words},
            "skew_pct": s.skew_pct,
            "slowest_rank": s.slowest_rank,
            "waited_on_rank": s.waited_on_rank,
            "per_rank": records(s.per_rank, PER_RANK_KEYS),
            "stragglers": records(s.stragglers, STRAGGLER_KEYS),
            "time_shares": records(s.class_shares, SHARE_KEYS),
            "collectives": {
                "matched": len(coll),
                "per_step": len(coll) / max(1, len(s.steps)),
                "complete": int(coll["complete"].sum()) if len(coll) else 0,
                "consistent": int(coll["consistent"].sum()) if len(coll) else 0,
                "by_kind": s.by_kind,
                "table": records(s.collective_table.head(TOP_COLLECTIVES), COLLECTIVE_KEYS),
                "table_rows": len(s.collective_table),
            },
            "ceiling": s.ceiling.to_json() if s.ceiling is not None else None,
            "measured": s.measured.to_json() if s.measured is not None else None,
            "notes": s.notes,
            "job": job_json(s.job) if s.job is not None else None,
            "shown_ranks": s.shown,
        }
    )
    return doc

"""The per-rank results (:mod:`tracekit.ranks.perrank`) read back for the reduce
(:mod:`tracekit.ranks.reduce`): every rank's Arrow tables, one concatenation per table,
each rank's number and time base (its ``trace_start_ns``) added in Arrow before the one
conversion to pandas; the timeline lanes kept in Arrow until their table in ms on the
common clock."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.ranks.collectives import INSTANCE_COLUMNS
from tracekit.ranks.groups import lookup
from tracekit.ranks.perrank import RESULT, STEP_COLUMNS


@dataclass
class Loaded:
    """The per-rank results, read back (times already absolute: ``trace_start_ns`` added)."""

    info: dict[int, dict[str, Any]]
    steps: pd.DataFrame  # STEP_COLUMNS + rank
    classes: pd.DataFrame
    instances: pd.DataFrame  # INSTANCE_COLUMNS + rank
    lanes: Any  # Arrow: rank, what, start_ns, end_ns (None: no lanes)


def _read(path: Path) -> Any:
    """One per-rank Arrow IPC file as an Arrow table (0.04 ms: a few kB)."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()


def _arrow(tables: list[tuple[int, Any]], times: list[str], bases: dict[int, int]) -> Any:
    """The ranks' tables (rank, Arrow table) as one Arrow table with a leading ``rank``
    column, the ``times`` columns with each rank's time base added (None: no rows)."""
    import pyarrow as pa

    got = [(r, t) for r, t in tables if t.num_rows]
    if not got:
        return None
    rows = [t.num_rows for _, t in got]
    t = pa.concat_tables([t for _, t in got], promote_options="default")
    off = np.repeat(np.asarray([bases.get(r, 0) for r, _ in got], dtype=np.int64), rows)
    for c in times:
        at = t.schema.get_field_index(c)
        t = t.set_column(at, c, pa.array(np.asarray(t[c].to_numpy(), dtype=np.int64) + off))
    rank = np.repeat(np.asarray([r for r, _ in got], dtype=np.int64), rows)
    return t.add_column(0, "rank", pa.array(rank))


def _frame(
    tables: list[tuple[int, Any]], cols: list[str], times: list[str], bases: dict[int, int]
) -> pd.DataFrame:
    """:func:`_arrow` as a frame: one concatenation, the columns added in Arrow before the
    one conversion to pandas."""
    t = _arrow(tables, times, bases)
    if t is None:
        return cast(pd.DataFrame, pd.DataFrame(columns=[*cols, "rank"]))
    return cast(pd.DataFrame, t.to_pandas())


def load(dirs: dict[int, Path], lane_ranks: set[int] | None = None) -> Loaded:
    """Every rank's results (Arrow, one concatenation per table); ``lanes`` only of
    ``lane_ranks`` (None: every rank)."""
    info: dict[int, dict[str, Any]] = {}
    parts: dict[str, list[tuple[int, Any]]] = {"steps": [], "classes": [], "inst": [], "lanes": []}
    for rank, d in sorted(dirs.items()):
        info[rank] = json.loads((Path(d) / RESULT).read_text())
        parts["steps"].append((rank, _read(Path(d) / "steps.arrow")))
        parts["classes"].append((rank, _read(Path(d) / "classes.arrow")))
        parts["inst"].append((rank, _read(Path(d) / "collectives.arrow")))
        if lane_ranks is None or rank in lane_ranks:
            parts["lanes"].append((rank, _read(Path(d) / "lanes.arrow")))
    bases = {r: int(i.get("trace_start_ns") or 0) for r, i in info.items()}
    times = ["start_ns", "end_ns"]
    return Loaded(
        info=info,
        steps=_frame(parts["steps"], STEP_COLUMNS, times, bases),
        classes=_frame(
            parts["classes"], ["class", "kernel_ns", "union_ns", "count", "busy_ns"], [], bases
        ),
        instances=_frame(parts["inst"], INSTANCE_COLUMNS, ["ts", "end"], bases),
        lanes=_arrow(parts["lanes"], times, bases),
    )


def lanes_of(dirs: dict[int, Path], ranks: list[int], info: dict[int, dict[str, Any]]) -> Any:
    """The lanes of ``ranks`` (Arrow, :func:`_arrow`)."""
    bases = {r: int(info[r].get("trace_start_ns") or 0) for r in ranks}
    return _arrow(
        [(r, _read(Path(dirs[r]) / "lanes.arrow")) for r in ranks], ["start_ns", "end_ns"], bases
    )


def lanes_ms(lanes: Any, offsets: dict[int, int], rs: pd.DataFrame, t0: int) -> pd.DataFrame:
    """The lanes (Arrow, :func:`_arrow`) on the common clock (each rank's ``offsets``
    added), in ms from ``t0``, those that end after it and start before the last step
    ends: straight from Arrow to one frame."""
    if lanes is None:
        return cast(pd.DataFrame, pd.DataFrame(columns=["rank", "what", "start_ms", "end_ms"]))
    ends = rs["start_ms"].to_numpy(dtype=float) + rs["step_time_ms"].to_numpy(dtype=float)
    hi = t0 + int(1e6 * float(np.nanmax(ends)))  # Series.max(): NaN skipped
    rank = lanes.column("rank").to_numpy().astype(np.int64)
    off = lookup(rank, offsets, 0).astype(np.int64)
    start = np.asarray(lanes.column("start_ns").to_numpy(), dtype=np.int64) + off
    end = np.asarray(lanes.column("end_ns").to_numpy(), dtype=np.int64) + off
    keep = (end > t0) & (start < hi)
    return cast(
        pd.DataFrame,
        pd.DataFrame(
            {
                "rank": rank[keep],
                "what": lanes.column("what").to_pandas().astype(str).array[keep],
                "start_ms": (start[keep] - t0) / 1e6,
                "end_ms": (end[keep] - t0) / 1e6,
            }
        ),
    )

"""Device-memory statistics from the trace's ``[memory]`` events (the ``memory`` table).

Every ``[memory]`` instant records the allocator's totals *after* an allocation or a free,
so ``total_allocated`` is a step function of time: the value of event *i* holds until
event *i + 1*. Peaks are the maxima of that function; averages are weighted by how long
each value held. All functions are pure: frames in, frames (or small dataclasses) out.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import tracekit.classify.models.memory as MM
from tracekit.errors import TraceError

CUDA = 1  # c10::DeviceType::CUDA, the memory table's device_type
CPU = 0


def empty(cols: list[str]) -> pd.DataFrame:
    """A frame with these columns and no rows."""
    frame: pd.DataFrame = pd.DataFrame(columns=cols)
    return frame


@dataclass(frozen=True)
class MemoryStats:
    """Allocator totals over the analysed window of one device."""

    device: str  # "cuda:0", "cpu"
    events: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    avg_allocated_bytes: float
    avg_reserved_bytes: float
    window_ns: int  # time span the averages cover


def device_events(memory: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The events of the device the report is about: the GPU with the most events, else
    the CPU. Returns the rows (time-ordered) and the device label ('cuda:N' or 'cpu')."""
    if memory.empty:
        return memory, ""
    gpu = (memory["device_type"] == CUDA).to_numpy()
    if gpu.any():
        device = memory["device"].to_numpy()
        dev = int(pd.Series(device[gpu]).value_counts().idxmax())
        keep = gpu & (device == dev)
        label = f"cuda:{dev}"
    else:
        keep = (memory["device_type"] == CPU).to_numpy()
        label = "cpu" if keep.any() else ""
    # copy (and sort) only when needed: the table has a text column and many rows
    rows = memory if keep.all() else memory[keep]
    ts = rows["ts"].to_numpy()
    if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
        rows = rows.sort_values("ts", kind="stable")
    return rows.reset_index(drop=True), label


def _time_weighted_mean(ts: np.ndarray, values: np.ndarray, end: int) -> tuple[float, int]:
    """Mean of a step function that takes ``values[i]`` on ``[ts[i], ts[i+1])`` and the last
    value up to ``end``. Returns (mean, window length); a zero-length window gives the
    plain mean of the values."""
    if len(ts) == 0:
        return float("nan"), 0
    nxt = np.append(ts[1:], max(int(end), int(ts[-1])))
    w = (nxt - ts).astype(np.float64)
    span = int(nxt[-1] - ts[0])
    if span <= 0:
        return float(np.mean(values.astype(np.float64))), 0
    return float(np.dot(values.astype(np.float64), w) / span), span


def memory_stats(memory: pd.DataFrame, window_end: int | None = None) -> MemoryStats | None:
    """Peak and time-weighted average allocated/reserved bytes (None without events).

    The averages cover the first event to ``window_end`` (default: the last event)."""
    rows, label = device_events(memory)
    if rows.empty:
        return None
    ts = rows["ts"].to_numpy(dtype=np.int64)
    alloc = rows["total_allocated"].to_numpy(dtype=np.float64)
    resv = rows["total_reserved"].to_numpy(dtype=np.float64)
    end = int(ts[-1]) if window_end is None else int(window_end)
    avg_a, span = _time_weighted_mean(ts, np.nan_to_num(alloc), end)
    avg_r, _ = _time_weighted_mean(ts, np.nan_to_num(resv), end)
    return MemoryStats(
        device=label,
        events=len(rows),
        peak_allocated_bytes=int(np.nanmax(alloc)) if np.isfinite(alloc).any() else 0,
        peak_reserved_bytes=int(np.nanmax(resv)) if np.isfinite(resv).any() else 0,
        avg_allocated_bytes=avg_a,
        avg_reserved_bytes=avg_r,
        window_ns=span,
    )


def timeline(memory: pd.DataFrame, max_points: int = 2000) -> pd.DataFrame:
    """Allocated and reserved bytes over time, at most ``max_points`` rows (:func:`thin`).

    Columns ``ts`` [ns], ``allocated``, ``reserved`` [bytes]."""
    rows, _ = device_events(memory)
    out = pd.DataFrame(
        {
            "ts": rows["ts"].to_numpy(dtype=np.int64),
            "allocated": rows["total_allocated"].to_numpy(dtype=np.float64),
            "reserved": rows["total_reserved"].to_numpy(dtype=np.float64),
        }
    )
    return thin(out, max_points)


def thin(tl: pd.DataFrame, max_points: int) -> pd.DataFrame:
    """A timeline (``ts``, ``allocated``, ``reserved``) cut to at most ``max_points`` rows:
    equal time buckets, each keeping its *maximum* values (so no peak is lost) at the time
    of its first event."""
    if len(tl) <= max_points:
        return tl
    t0, t1 = int(tl["ts"].iloc[0]), int(tl["ts"].iloc[-1])
    bucket = ((tl["ts"] - t0) * (max_points - 1) // max(1, t1 - t0)).to_numpy(dtype=np.int64)
    g = tl.groupby(bucket, sort=True)
    frame: pd.DataFrame = pd.DataFrame(
        {
            "ts": g["ts"].min().to_numpy(),
            "allocated": g["allocated"].max().to_numpy(),
            "reserved": g["reserved"].max().to_numpy(),
        }
    )
    return frame


def top_allocators(memory: pd.DataFrame, n: int = 10, steps: int = 1) -> pd.DataFrame:
    """Operators that allocate the most device memory.

    Columns: ``op_name``, ``allocations`` (count), ``bytes_allocated`` (sum of positive
    events), ``bytes_per_step`` (that over ``steps``), ``largest_bytes``, ``pct`` (share of
    all bytes allocated). Allocations outside any operator are grouped as
    ``(no operator)``."""
    rows, _ = device_events(memory)
    cols = ["op_name", "allocations", "bytes_allocated", "bytes_per_step", "largest_bytes", "pct"]
    if rows.empty:
        return empty(cols)
    pos = rows[rows["bytes"] > 0]
    if pos.empty:
        return empty(cols)
    name = pos["op_name"].fillna("(no operator)").astype(str)
    g = pos.groupby(name, sort=False)["bytes"]
    t = pd.DataFrame(
        {
            "allocations": g.size(),
            "bytes_allocated": g.sum().astype(np.int64),
            "largest_bytes": g.max().astype(np.int64),
        }
    )
    t["bytes_per_step"] = t["bytes_allocated"] / max(1, steps)
    total = float(t["bytes_allocated"].sum())
    t["pct"] = 100.0 * t["bytes_allocated"] / total if total else 0.0
    t = t.sort_values(["bytes_allocated", "allocations"], ascending=False, kind="stable")
    t = t.head(n).rename_axis("op_name").reset_index()
    frame: pd.DataFrame = t[cols]
    return frame


# --------------------------------------------------------------------------- categories


@dataclass(frozen=True)
class CategoryTimeline:
    """PyTorch's per-category memory timeline, as the collector exports it."""

    device: str
    categories: list[str]
    times_us: np.ndarray  # profiler clock, microseconds
    bytes: np.ndarray  # shape (len(times_us), len(categories))


def load_category_timeline(path: Path) -> CategoryTimeline:
    """Read a ``*.memory_timeline.json.gz`` written by ``tracekit collect``
    (format ``tracekit.memory_timeline`` version 1; see docs/collect.md)."""
    try:
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
    except (OSError, ValueError, EOFError) as e:
        raise TraceError(f"{path}: unreadable memory timeline ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "tracekit.memory_timeline":
        raise TraceError(f"{path}: not a tracekit memory timeline")
    if doc.get("version") != 1:
        raise TraceError(f"{path}: memory timeline version {doc.get('version')}, expected 1")
    cats = [str(c) for c in doc.get("categories", [])]
    times = np.asarray(doc.get("times_us", []), dtype=np.float64)
    data = np.asarray(doc.get("bytes", []), dtype=np.float64)
    if data.size == 0:
        data = np.zeros((0, len(cats)))
    if data.ndim != 2 or data.shape != (len(times), len(cats)):
        raise TraceError(f"{path}: memory timeline rows do not match its categories")
    return CategoryTimeline(
        device=str(doc.get("device", "")), categories=cats, times_us=times, bytes=data
    )


def downsample_categories(tl: CategoryTimeline, max_points: int = 2000) -> CategoryTimeline:
    """At most ``max_points`` rows: per time bucket, the row with the largest total (the
    stack's peaks survive)."""
    n = len(tl.times_us)
    if n <= max_points:
        return tl
    t0, t1 = tl.times_us[0], tl.times_us[-1]
    span = max(t1 - t0, 1e-9)
    bucket = np.floor((tl.times_us - t0) * (max_points - 1) / span).astype(np.int64)
    total = tl.bytes.sum(axis=1)
    order = np.lexsort((-total, bucket))  # by bucket, largest total first
    first = np.ones(n, dtype=bool)
    first[1:] = bucket[order][1:] != bucket[order][:-1]
    keep = np.sort(order[first])
    return CategoryTimeline(tl.device, tl.categories, tl.times_us[keep], tl.bytes[keep])


def peaks_per_step(memory: pd.DataFrame) -> pd.DataFrame:
    """Peak allocated and reserved bytes per step (``step``, ``peak_allocated``,
    ``peak_reserved``) of the report's device; events outside steps are left out."""
    rows, _ = device_events(memory)
    rows = rows[rows["step"] >= 0] if not rows.empty else rows
    if rows.empty:
        return empty(["step", "peak_allocated", "peak_reserved"])
    g = rows.groupby("step", sort=True)
    frame: pd.DataFrame = pd.DataFrame(
        {
            "step": np.asarray(list(g.groups), dtype=np.int64),
            "peak_allocated": g["total_allocated"].max().to_numpy(dtype=np.float64),
            "peak_reserved": g["total_reserved"].max().to_numpy(dtype=np.float64),
        }
    )
    return frame


# --------------------------------------------------------------------------- dynamic memory


def floor_allocated(memory: pd.DataFrame, steps: list[int]) -> int | None:
    """The lowest allocated bytes of the report's device during the analysed steps: what
    persists across steps (weights, optimizer state, buffers, workspaces). Each event
    records the total *after* it, so the value before event *i* is ``total - bytes``."""
    rows, _ = device_events(memory)
    if rows.empty:
        return None
    rows = rows[rows["step"].isin(steps)]
    if rows.empty:
        return None
    after = rows["total_allocated"].to_numpy(dtype=np.int64)
    before = after - rows["bytes"].to_numpy(dtype=np.int64)
    return int(min(after.min(), before.min()))


def category_peak(tl: CategoryTimeline) -> dict[str, float]:
    """Bytes per timeline category at the moment of the largest total ({} when empty)."""
    if not len(tl.times_us):
        return {}
    row = tl.bytes[int(np.argmax(tl.bytes.sum(axis=1)))]
    return {c: float(v) for c, v in zip(tl.categories, row, strict=True)}


def model_categories(at_peak: dict[str, float], allocator_peak: float | None) -> dict[str, float]:
    """Timeline categories at the peak mapped onto the memory model's five
    (:data:`tracekit.classify.models.memory.TIMELINE_TO_CATEGORY`; unknown names go to
    ``other``), plus the allocator memory the timeline does not see (``allocator_peak`` −
    timeline total: library workspaces, block rounding) in ``other``."""
    out = {c: 0.0 for c in MM.CATEGORIES}
    for cat, v in at_peak.items():
        out[MM.TIMELINE_TO_CATEGORY.get(cat, "other")] += v
    if allocator_peak is not None:
        out["other"] += max(0.0, float(allocator_peak) - sum(at_peak.values()))
    return out

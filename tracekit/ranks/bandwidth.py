"""Bus bandwidth of the collectives against the interconnect's ceiling.

The ceiling comes, in this order, from

1. the run's measured sweep (manifest ``ceilings.interconnect``, ``tracekit collect --gpus
   N``): per collective kind, busbw by message size; a collective is compared with the
   peak busbw its kind reached (a kind the sweep did not time — all-to-all, broadcast —
   with all-reduce's peak), and the busbw the sweep measured at the nearest size is shown
   beside it;
2. the spec table :data:`tracekit.classify.families.communication.INTERCONNECT` (the GPU's
   links in one direction, e.g. NVLink 4: 450 GB/s per H100/H200), for the device the
   traces name;

and is marked ``measured`` or ``spec``, like the compute roofs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.families.communication import COLLECTIVES, INTERCONNECT
from tracekit.manifest import read_manifest
from tracekit.ranks.groups import descending, series_mean, series_mode, series_sum

AGG_COLUMNS = [
    "pg", "kind", "dtype", "message_bytes", "group_size", "count", "per_step", "dur_mean_ms",
    "transfer_mean_ms", "wait_mean_ms", "wait_pct", "time_ms_per_step", "algbw_Bps",
    "busbw_Bps", "ceiling_Bps", "busbw_pct_of_ceiling", "measured_at_size_Bps",
    "ceiling_source", "last_rank",
]  # fmt: skip


@dataclass(frozen=True)
class Ceiling:
    """The busbw ceiling. ``peaks``: per kind, the measured peak busbw; ``sweeps``: per
    kind, (bytes, busbw) of the measured sweep; ``spec_Bps``: the spec table's figure."""

    source: str  # 'measured' | 'spec'
    busbw_Bps: float  # all-reduce's measured peak, or the spec figure
    detail: str
    peaks: Mapping[str, float] = field(default_factory=dict)
    sweeps: Mapping[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    world_size: int | None = None

    def for_kind(self, kind: str) -> float:
        return float(self.peaks.get(kind, self.busbw_Bps))

    def measured_at(self, kind: str, nbytes: float) -> float | None:
        """The sweep's busbw at the size nearest to ``nbytes`` (log scale), if measured."""
        rows = self.sweeps.get(kind)
        if not rows or not nbytes or nbytes != nbytes or nbytes <= 0:
            return None
        sizes = np.log2(np.asarray([r[0] for r in rows], dtype=np.float64))
        i = int(np.argmin(np.abs(sizes - math.log2(nbytes))))
        return float(rows[i][1])

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "busbw_Bps": self.busbw_Bps,
            "detail": self.detail,
            "peak_busbw_Bps_by_kind": dict(self.peaks),
            "world_size": self.world_size,
        }


def measured_ceiling(manifest: Mapping[str, Any] | None) -> Ceiling | None:
    m = read_manifest(manifest)
    ic = m.ceilings.interconnect if m is not None and m.ceilings is not None else None
    if not isinstance(ic, dict) or not isinstance(ic.get("busbw_Bps"), (int, float)):
        return None
    peaks: dict[str, float] = {}
    sweeps: dict[str, list[tuple[float, float]]] = {}
    for kind, res in (ic.get("collectives") or {}).items():
        if not isinstance(res, dict):
            continue
        rows = [
            (float(r["bytes"]), float(r["busbw_Bps"]))
            for r in res.get("sizes") or []
            if isinstance(r, dict) and isinstance(r.get("busbw_Bps"), (int, float))
        ]
        if rows:
            sweeps[kind] = rows
            peaks[kind] = float(res.get("peak_busbw_Bps") or max(b for _, b in rows))
    n = ic.get("world_size")
    return Ceiling(
        source="measured",
        busbw_Bps=float(ic["busbw_Bps"]),
        detail=f"measured by tracekit collect: {ic.get('backend')} on {n} ranks, "
        f"{ic.get('dtype')}, nccl-tests convention (manifest ceilings.interconnect)",
        peaks=peaks,
        sweeps=sweeps,
        world_size=int(n) if isinstance(n, int) else None,
    )


def spec_ceiling(device_properties: Sequence[Mapping[str, Any]]) -> Ceiling | None:
    from tracekit.classify.devices import match_spec

    for props in device_properties or []:
        spec, _ = match_spec(props)
        link = INTERCONNECT.get(spec.key) if spec is not None else None
        if link is not None and spec is not None:
            return Ceiling(
                source="spec",
                busbw_Bps=link.busbw_Bps,
                detail=f"{spec.label}, {link.link}: {link.source}",
            )
    return None


def ceiling(
    manifest: Mapping[str, Any] | None, device_properties: Sequence[Mapping[str, Any]]
) -> Ceiling | None:
    """The measured ceiling where the run has one, else the spec table's, else None."""
    return measured_ceiling(manifest) or spec_ceiling(device_properties)


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _by_signature(matched: pd.DataFrame) -> list[np.ndarray]:
    """The rows of each (group, kind, dtype, message size, group size), in order of first
    appearance (pandas' ``groupby(sort=False, dropna=False)``; a missing dtype as ``?``, a
    missing size as -1): a dictionary over the few hundred collectives."""
    nbytes = matched["message_bytes"].to_numpy(dtype=np.float64)
    cols = (
        [None if _missing(v) else v for v in matched["pg"].tolist()],
        matched["kind"].tolist(),
        ["?" if _missing(v) else v for v in matched["dtype"].tolist()],
        np.where(np.isnan(nbytes), -1.0, nbytes).tolist(),
        matched["group_size"].tolist(),
    )
    rows: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(zip(*cols, strict=True)):
        rows.setdefault(key, []).append(i)
    return [np.asarray(r, dtype=np.int64) for r in rows.values()]


def aggregate(matched: pd.DataFrame, n_steps: int, ceil: Ceiling | None) -> pd.DataFrame:
    """The collectives table: one row per (group, kind, dtype, message size), most time
    first (:data:`AGG_COLUMNS`). busbw is the group's bus bytes over its transfer time."""
    if not len(matched):
        return cast(pd.DataFrame, pd.DataFrame(columns=AGG_COLUMNS))
    pg, kind, dtype = (matched[c].tolist() for c in ("pg", "kind", "dtype"))
    nbytes_all = matched["message_bytes"].to_numpy(dtype=np.float64)
    size = matched["group_size"].to_numpy()
    ranks, transfer_ns = matched["ranks"].to_numpy(), matched["transfer_ns"].to_numpy()
    dur = matched["dur_mean_ns"].to_numpy(dtype=np.float64)
    waits = matched["wait_mean_ns"].to_numpy(dtype=np.float64)
    last_rank = matched["last_rank"].to_numpy()
    rows: dict[str, list[Any]] = {c: [] for c in AGG_COLUMNS}
    for at in _by_signature(matched):
        i = int(at[0])
        nbytes = float(nbytes_all[i]) if nbytes_all[i] == nbytes_all[i] else -1.0
        k, n, dt = kind[i], int(size[i]), dtype[i]
        seen = at[ranks[at] >= 2]  # a transfer needs two ranks
        transfer = float(transfer_ns[seen].sum())
        known = nbytes >= 0
        alg = nbytes * len(seen) / (transfer / 1e9) if known and transfer > 0 else math.nan
        model = COLLECTIVES.get(str(k))
        bus = alg * model.factor(n) if model is not None else math.nan
        cap = ceil.for_kind(str(k)) if ceil is not None else math.nan
        d, w = dur[at], waits[at]
        row = {
            "pg": pg[i],
            "kind": k,
            "dtype": None if _missing(dt) or dt == "?" else dt,
            "message_bytes": nbytes if known else math.nan,
            "group_size": n,
            "count": len(at),
            "per_step": len(at) / max(1, n_steps),
            "dur_mean_ms": series_mean(d) / 1e6,
            "transfer_mean_ms": transfer / len(seen) / 1e6 if len(seen) else math.nan,
            "wait_mean_ms": series_mean(w) / 1e6,
            "wait_pct": 100.0 * series_sum(w) / max(1.0, series_sum(d)),
            "time_ms_per_step": series_sum(d) / 1e6 / max(1, n_steps),
            "algbw_Bps": alg,
            "busbw_Bps": bus,
            "ceiling_Bps": cap,
            "busbw_pct_of_ceiling": 100.0 * bus / cap if cap and cap == cap else math.nan,
            "measured_at_size_Bps": (
                ceil.measured_at(str(k), nbytes) if ceil is not None and known else None
            ),
            "ceiling_source": ceil.source if ceil is not None else None,
            "last_rank": series_mode(last_rank[seen]) if len(seen) else -1,
        }
        for c in AGG_COLUMNS:
            rows[c].append(row[c])
    sweep = rows["measured_at_size_Bps"]  # floats or None: pd.to_numeric's float64, NaN
    rows["measured_at_size_Bps"] = [math.nan if v is None else v for v in sweep]
    # sort_values("time_ms_per_step", ascending=False, kind="stable"), reset_index
    order = descending(np.asarray(rows["time_ms_per_step"], dtype=float), "stable").tolist()
    return cast(pd.DataFrame, pd.DataFrame({c: [rows[c][i] for i in order] for c in AGG_COLUMNS}))


def by_kind(matched: pd.DataFrame, ceil: Ceiling | None) -> dict[str, dict[str, Any]]:
    """Per kind over every sized instance: total bus bytes / total transfer time, and the
    best single collective's busbw (the headline figures)."""
    out: dict[str, dict[str, Any]] = {}
    nbytes = matched["message_bytes"].to_numpy(dtype=np.float64)
    transfer = matched["transfer_ns"].to_numpy()
    sized = ~np.isnan(nbytes) & (transfer > 0) & (matched["ranks"].to_numpy() >= 2)
    kinds = matched["kind"].tolist()
    size, busbw = matched["group_size"].tolist(), matched["busbw_Bps"].to_numpy(dtype=np.float64)
    rows: dict[str, list[int]] = {}
    for i in np.flatnonzero(sized).tolist():
        if not _missing(kinds[i]):  # groupby's dropna
            rows.setdefault(kinds[i], []).append(i)
    for kind in sorted(rows):
        model = COLLECTIVES.get(str(kind))
        if model is None:
            continue
        at = np.asarray(rows[kind], dtype=np.int64)
        bus_bytes = sum(float(nbytes[i]) * model.factor(int(size[i])) for i in rows[kind])
        bus = bus_bytes / (float(transfer[at].sum()) / 1e9)
        best = busbw[at][~np.isnan(busbw[at])]
        cap = ceil.for_kind(str(kind)) if ceil is not None else None
        out[str(kind)] = {
            "count": len(at),
            "busbw_Bps": bus,
            "best_busbw_Bps": float(best.max()) if len(best) else math.nan,
            "ceiling_Bps": cap,
            "busbw_pct_of_ceiling": 100.0 * bus / cap if cap else None,
            "ceiling_source": ceil.source if ceil is not None else None,
        }
    return out

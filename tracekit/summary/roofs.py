"""The roofs of the roofline plot and table, read from ``Classification.device``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Roofs:
    """Peak FLOP/s per precision pipe and the memory bandwidth, with their sources."""

    device: str | None = None
    peaks: dict[str, float] = field(default_factory=dict)  # FLOP/s
    peak_sources: dict[str, str] = field(default_factory=dict)
    bandwidth: float | None = None  # bytes/s
    bandwidth_source: str = ""

    @property
    def known(self) -> bool:
        return self.bandwidth is not None and bool(self.peaks)

    def ridge(self, pipe: str) -> float | None:
        p = self.peaks.get(pipe)
        return p / self.bandwidth if p and self.bandwidth else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def roofs_from(device: Any) -> Roofs:
    """``Classification.device``: one row per pipe with ``pipe``, ``peak_flops``,
    ``peak_source``, ``bandwidth``, ``bandwidth_source`` (and ``device``); an object
    with a ``frame()`` method giving that table is accepted too."""
    frame = device.frame() if hasattr(device, "frame") else device
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        return Roofs()
    peaks: dict[str, float] = {}
    sources: dict[str, str] = {}
    for row in frame.itertuples(index=False):
        p = _num(getattr(row, "peak_flops", None))
        if p is not None:
            peaks[str(row.pipe)] = p
            sources[str(row.pipe)] = str(getattr(row, "peak_source", "") or "")
    bw = None
    bw_src = ""
    if "bandwidth" in frame:
        vals = [b for b in (_num(v) for v in frame["bandwidth"]) if b is not None]
        if vals:
            bw = vals[0]
            if "bandwidth_source" in frame:
                bw_src = str(frame["bandwidth_source"].dropna().iloc[0])
    name = None
    if "device" in frame and frame["device"].notna().any():
        name = str(frame["device"].dropna().iloc[0])
    return Roofs(
        device=name, peaks=peaks, peak_sources=sources, bandwidth=bw, bandwidth_source=bw_src
    )

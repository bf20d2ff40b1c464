"""The roofs of the roofline plot and table, read from ``Classification.device``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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


def roof_note(operators: pd.DataFrame, utilisation_pct: dict[str, float | None]) -> str | None:
    """The note any figure above 100 % of its roof needs (None: there is none).

    ``operators``: the report's operator table (``name``, ``input_dims``, ``roof_pct``);
    ``utilisation_pct``: the step summary's shares of the roofs, by what they measure. A
    roof is a ceiling (the classify stage raised every measured roof that an operator beat
    to the spec where that is higher), so what is left above it is in the figures: bytes
    that L2 served counted as DRAM traffic, or a fused kernel's cost modelled from the
    operators it fused, or tensor-list sizes assumed."""
    parts = []
    if "roof_pct" in operators and len(operators):
        pct = operators["roof_pct"].to_numpy(dtype=float)
        over = np.flatnonzero(np.isfinite(pct) & (pct > 100.0))
        if len(over):
            top = over[np.argmax(pct[over])]
            name = str(operators["name"].iloc[top])
            parts.append(
                f"{len(over)} operator{'s' if len(over) > 1 else ''} above 100 % of "
                f"{'their' if len(over) > 1 else 'its'} roof (up to {pct[top]:.0f} %, {name})"
            )
    for what, v in utilisation_pct.items():
        if v is not None and math.isfinite(v) and v > 100.0:
            parts.append(f"the step's {what} at {v:.0f} % of its roof")
    if not parts:
        return None
    return (
        "; ".join(parts) + ": a roof is a ceiling (measured roofs an operator beat were "
        "raised to the spec sheet's), so the excess is in the figures, not the hardware: "
        "bytes served from L2 counted as DRAM traffic, a fused kernel costed from the "
        "operators it fused, or tensor sizes the profiler did not record (operators.parquet "
        "and classify's cost_note say which)"
    )

"""The ranks of a large job as distributions, and the ranks that stand out by robust
statistics (median and MAD, never "the max": among 1,024 ranks some rank is always the
slowest).

Per rank, the median over the compared steps of each part of its step (:data:`PARTS`, ms
per step). A rank stands out in a part when its robust z-score ``(x - median) / (1.4826 x
MAD)`` is at least :data:`Z_MIN` AND its excess over the job's median is large enough to
matter (:data:`MIN_EXCESS`): a job whose ranks agree to 0.1 % has a tiny MAD, and a rank
0.5 % slower would otherwise be a "straggler". The MAD is floored at :data:`MAD_FLOOR` of
the median for the same reason. Below :data:`MIN_RANKS` ranks nothing is called an outlier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# (column of the per-rank figures, words)
PARTS: tuple[tuple[str, str], ...] = (
    ("step_time_ms", "step"),
    ("compute_ms", "compute"),
    ("exposed_comm_ms", "exposed communication"),
    ("arrival_wait_ms", "wait for others (in collectives)"),
    ("input_ms", "input wait"),
    ("idle_ms", "GPU idle"),
    ("internode_transfer_ms", "own transfer, inter-node collectives"),
)
Z_MIN = 6.0
MAD_FLOOR = 0.002  # of |median|
MIN_RANKS = 8
TAIL = 3  # ranks named at each distribution's tail
# the least excess over the median, per part: a fraction of the part's median, or of the
# job's median step (parts whose median may be ~0, input wait)
MIN_EXCESS = {
    "compute_ms": ("part", 0.05),
    "input_ms": ("step", 0.02),
    "internode_transfer_ms": ("part", 0.30),
}


@dataclass(frozen=True)
class Distribution:
    """One part of the step over the ranks (ms per step)."""

    part: str
    words: str
    median: float
    p90: float
    p99: float
    max: float
    tail: tuple[tuple[int, float], ...]  # the largest: (rank, value), largest first


def distributions(fig: pd.DataFrame) -> list[Distribution]:
    """Every part of :data:`PARTS` that ``fig`` (one row per rank, ``rank`` + parts) has."""
    out: list[Distribution] = []
    parts = [(c, w) for c, w in PARTS if c in fig] if len(fig) else []
    if not parts:
        return out
    all_ranks = fig["rank"].to_numpy()
    values = np.stack([fig[c].to_numpy(dtype=float) for c, _ in parts])
    finite = np.isfinite(values)
    # every part at once where all are finite (each row as np.median / np.percentile alone)
    whole = bool(finite.all())
    if whole:
        medians = np.median(values, axis=1)
        p90s, p99s = np.percentile(values, [90, 99], axis=1)
    for j, (col, words) in enumerate(parts):
        ok = finite[j]
        if not ok.any():
            continue
        v, ranks = values[j][ok], all_ranks[ok]
        top = np.argsort(-v, kind="stable")[:TAIL]
        med, (p90, p99) = (
            (medians[j], (p90s[j], p99s[j]))
            if whole
            else (np.median(v), np.percentile(v, [90, 99]))
        )
        out.append(
            Distribution(
                part=col,
                words=words,
                median=float(med),
                p90=float(p90),
                p99=float(p99),
                max=float(v.max()),
                tail=tuple((int(ranks[i]), float(v[i])) for i in top),
            )
        )
    return out


def robust_z(values: np.ndarray) -> np.ndarray:
    """``(x - median) / (1.4826 x MAD)``, the MAD floored at :data:`MAD_FLOOR` x |median|
    (and at 1e-9); NaN stays NaN."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    if not ok.any():
        return np.full(v.shape, math.nan)
    med = float(np.median(v[ok]))
    mad = float(np.median(np.abs(v[ok] - med)))
    scale = 1.4826 * max(mad, MAD_FLOOR * abs(med), 1e-9)
    return (v - med) / scale


@dataclass(frozen=True)
class Outlier:
    """A rank that stands out high in a part (ms per step)."""

    rank: int
    value: float
    median: float  # the job's
    excess: float  # value - median
    ratio: float  # value / median (NaN where the median is 0)
    z: float


def outliers(fig: pd.DataFrame, part: str, step_median: float) -> list[Outlier]:
    """The ranks that stand out high in ``part``, largest z first (none below
    :data:`MIN_RANKS` ranks)."""
    if part not in fig or len(fig) < MIN_RANKS:
        return []
    v = fig[part].to_numpy(dtype=float)
    z = robust_z(v)
    med = float(np.nanmedian(v))
    basis, frac = MIN_EXCESS.get(part, ("part", 0.05))
    least = frac * (step_median if basis == "step" else abs(med))
    ranks = fig["rank"].to_numpy(dtype=np.int64)
    out = [
        Outlier(int(ranks[i]), float(v[i]), med, float(v[i] - med),
                float(v[i] / med) if med > 0 else math.nan, float(z[i]))
        for i in np.flatnonzero((z >= Z_MIN) & (v - med >= least))
    ]  # fmt: skip
    return sorted(out, key=lambda o: -o.z)

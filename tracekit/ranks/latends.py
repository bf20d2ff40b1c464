"""A rank whose links are slower ends every collective late, the one the clocks are aligned
on included: aligned on its end, that rank's clock is shifted early by its own extra
transfer there, and every later transfer of its reads that much shorter (a node made 2x
slower read as 1.8x). The correction here cannot be skewed by the slow rank itself: a
clock offset shifts all of a rank's transfers by one constant, a slower link stretches
them in proportion to the collective, so over collectives of different sizes the rank's
own transfer (from the last rank's arrival to its own end) regressed on the job's median
transfer of each collective has the rank's slowdown as slope and its clock error as
intercept."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.ranks.groups import Groups, lookup

SLOWER = 1.1  # a rank whose transfers scale this much over the job's: its anchor end is late
SPREAD = 2.0  # the collectives' median transfers must span this factor to fit a slope


def late_ends(inst: pd.DataFrame, offsets: dict[int, int]) -> dict[int, int]:
    """Per rank whose transfers are slower than the job's (slope over :data:`SLOWER`), how
    many ns its clock offset should move later (``inst``: matched instances with ``key``,
    ``rank``, ``ts``, ``end`` on the ranks' own clocks; ``offsets``: rank -> ns)."""
    if not len(inst):
        return {}
    off = lookup(inst["rank"].to_numpy(), offsets, 0).astype(np.int64)
    key, rank = inst["key"].to_numpy(), inst["rank"].to_numpy()
    ts = inst["ts"].to_numpy(dtype=np.int64) + off
    end = inst["end"].to_numpy(dtype=np.int64) + off
    by_key = Groups.of(key)
    keep = by_key.sizes[by_key.inverse] >= 2
    if not keep.any():
        return {}
    key, rank, ts, end = key[keep], rank[keep], ts[keep], end[keep]
    by_key = Groups.of(key)
    y = (end - by_key.max(ts)[by_key.inverse]).astype(float)
    x = by_key.median(y)[by_key.inverse]
    if not (x > 0).any() or x.max() < SPREAD * max(float(x[x > 0].min()), 1.0):
        return {}
    by_rank = Groups.of(rank)
    n = by_rank.sizes
    sx, sy, sxx, sxy = by_rank.fsum(np.stack([x, y, x * x, x * y]))  # one pass: 4 sums
    var = n * sxx - sx**2
    ok = var > 0
    slope = (n * sxy - sx * sy)[ok] / var[ok]
    icept = (sy[ok] - slope * sx[ok]) / n[ok]
    late = (slope > SLOWER) & (icept < 0)
    return {
        int(r): round(float(-v)) for r, v in zip(by_rank.keys[ok][late], icept[late], strict=True)
    }

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

SLOWER = 1.1  # a rank whose transfers scale this much over the job's: its anchor end is late
SPREAD = 2.0  # the collectives' median transfers must span this factor to fit a slope


def late_ends(inst: pd.DataFrame, offsets: dict[int, int]) -> dict[int, int]:
    """Per rank whose transfers are slower than the job's (slope over :data:`SLOWER`), how
    many ns its clock offset should move later (``inst``: matched instances with ``key``,
    ``rank``, ``ts``, ``end`` on the ranks' own clocks; ``offsets``: rank -> ns)."""
    if not len(inst):
        return {}
    off = inst["rank"].map(offsets).fillna(0).to_numpy(dtype=np.int64)
    df = pd.DataFrame(
        {"key": inst["key"].to_numpy(), "rank": inst["rank"].to_numpy(),
         "ts": inst["ts"].to_numpy(dtype=np.int64) + off,
         "end": inst["end"].to_numpy(dtype=np.int64) + off}
    )  # fmt: skip
    g = df.groupby("key")
    df = df[g["rank"].transform("size").to_numpy() >= 2]
    if not len(df):
        return {}
    y = (df["end"] - df.groupby("key")["ts"].transform("max")).to_numpy(dtype=float)
    x = pd.Series(y).groupby(df["key"].to_numpy()).transform("median").to_numpy()
    if not (x > 0).any() or x.max() < SPREAD * max(float(x[x > 0].min()), 1.0):
        return {}
    t = pd.DataFrame({"rank": df["rank"].to_numpy(), "x": x, "y": y, "xx": x * x, "xy": x * y})
    s = t.groupby("rank").agg(n=("x", "size"), x=("x", "sum"), y=("y", "sum"),
                              xx=("xx", "sum"), xy=("xy", "sum"))  # fmt: skip
    var = s["n"] * s["xx"] - s["x"] ** 2
    ok = var > 0
    slope = (s["n"] * s["xy"] - s["x"] * s["y"])[ok] / var[ok]
    icept = (s["y"][ok] - slope * s["x"][ok]) / s["n"][ok]
    late = icept[(slope > SLOWER) & (icept < 0)]
    return {int(r): round(float(-v)) for r, v in late.items()}

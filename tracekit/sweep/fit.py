"""Scaling fits over the sweep table: power laws (log-log least squares) and, along the
sequence axis, a quadratic a + b·T + c·T² that exposes naive attention's T² term."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.errors import UsageError
from tracekit.sweep.plan import config_columns
from tracekit.sweep.rows import complete

# The table's measured quantities that are fitted, and the axes they are fitted along.
QUANTITIES = (
    "peak_bytes",
    "dynamic_peak_bytes",
    "mem_activations_bytes",
    "tokens_per_s",
    "step_time_ms",
)
AXES = ("batch", "seq")
# A quadratic term is reported as present when it makes up at least this share of the
# fitted value at the longest sequence.
T2_SHARE_MIN = 0.05


@dataclass(frozen=True)
class PowerFit:
    exponent: float
    prefactor: float
    r2: float
    n: int


@dataclass(frozen=True)
class QuadFit:
    a: float
    b: float
    c: float
    r2: float
    n: int
    t2_share_at_max: float  # c·T² / fitted value at the largest T


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    ss_res = float(np.sum((y - fitted) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else math.nan
    return 1.0 - ss_res / ss_tot


def power_fit(x: Any, y: Any) -> PowerFit:
    """y = k·x^p by least squares on log y = log k + p·log x; R² of the log fit."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    xa, ya = xa[ok], ya[ok]
    if len(np.unique(xa)) < 2:
        raise UsageError("a power-law fit needs at least two distinct positive x values")
    lx, ly = np.log(xa), np.log(ya)
    p, logk = np.polyfit(lx, ly, 1)
    return PowerFit(float(p), float(math.exp(logk)), _r2(ly, p * lx + logk), len(xa))


def quadratic_fit(t: Any, y: Any) -> QuadFit:
    """y = a + b·T + c·T² by least squares (needs three distinct T)."""
    ta, ya = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(ta) & np.isfinite(ya)
    ta, ya = ta[ok], ya[ok]
    if len(np.unique(ta)) < 3:
        raise UsageError("a quadratic fit needs at least three distinct x values")
    c, b, a = np.polyfit(ta, ya, 2)
    fitted = a + b * ta + c * ta**2
    tmax = float(ta.max())
    top = a + b * tmax + c * tmax**2
    # a share of the fitted value only where the T² term is a part of it (0–100 %): a
    # falling quantity (tokens/s) or a term larger than the whole has none
    share = float(c * tmax**2 / top) if top > 0 else math.nan
    if not 0.0 <= share <= 1.0:
        share = math.nan
    return QuadFit(float(a), float(b), float(c), _r2(ya, fitted), len(ta), share)


def lines(table: pd.DataFrame, axis: str) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """Groups of ok rows that differ only along ``axis`` (at least two points each)."""
    if axis not in AXES:
        raise UsageError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    ok = table[table["status"] == "ok"]
    fixed = [c for c in config_columns(table) if c != axis]
    out = []
    for keys, g in ok.groupby(fixed, sort=True):
        if g[axis].nunique() >= 2:
            out.append((dict(zip(fixed, keys, strict=True)), g.sort_values(axis)))
    return out


def fit_table(table: pd.DataFrame, quantities: tuple[str, ...] = QUANTITIES) -> pd.DataFrame:
    """One row per (quantity, axis, line): exponent + R², and along seq the quadratic."""
    table = complete(table)
    recs: list[dict[str, Any]] = []
    for axis in AXES:
        for fixed, g in lines(table, axis):
            for q in quantities:
                if q not in g.columns or g[q].isna().all():
                    continue
                rec: dict[str, Any] = {"quantity": q, "axis": axis, **fixed}
                rec["line"] = ", ".join(f"{k}={v}" for k, v in fixed.items())
                rec["x_values"] = ",".join(str(int(v)) for v in g[axis])
                try:
                    pf = power_fit(g[axis], g[q])
                except UsageError:
                    continue
                rec.update(exponent=pf.exponent, prefactor=pf.prefactor, r2=pf.r2, n=pf.n)
                rec.update(
                    quad_a=math.nan,
                    quad_b=math.nan,
                    quad_c=math.nan,
                    quad_r2=math.nan,
                    t2_share_at_max=math.nan,
                    t2_term=None,
                )
                if axis == "seq" and g[axis].nunique() >= 3:
                    qf = quadratic_fit(g[axis], g[q])
                    rec.update(
                        quad_a=qf.a,
                        quad_b=qf.b,
                        quad_c=qf.c,
                        quad_r2=qf.r2,
                        t2_share_at_max=qf.t2_share_at_max,
                        t2_term=bool(qf.c > 0 and qf.t2_share_at_max >= T2_SHARE_MIN),
                    )
                recs.append(rec)
    cols = [
        "quantity",
        "axis",
        "line",
        "batch",
        "seq",
        "dtype",
        "attention",
        *(["gpus"] if "gpus" in config_columns(table) else []),
        "x_values",
        "exponent",
        "prefactor",
        "r2",
        "n",
        "quad_a",
        "quad_b",
        "quad_c",
        "quad_r2",
        "t2_share_at_max",
        "t2_term",
    ]
    df = pd.DataFrame(recs)
    for c in cols:
        if c not in df.columns:
            df[c] = pd.Series(dtype=object)
    out: pd.DataFrame = df[cols]
    return out


def largest_fitting(table: pd.DataFrame) -> pd.DataFrame:
    """Per (dtype, attention): the ok configuration with the most tokens per step, and the
    smallest configuration that did not fit (OOM), if any."""
    recs = []
    for (dtype, attn), g in table.groupby(["dtype", "attention"], sort=True):
        ok = g[g["status"] == "ok"]
        oom = g[g["status"] == "oom"]
        rec: dict[str, Any] = {"dtype": dtype, "attention": attn}
        if len(ok):
            best = ok.sort_values(["tokens", "batch"]).iloc[-1]
            rec.update(
                largest_ok=best["key"],
                largest_ok_tokens=int(best["tokens"]),
                largest_ok_peak_bytes=float(best.get("peak_bytes", math.nan)),
            )
        else:
            rec.update(largest_ok=None, largest_ok_tokens=math.nan, largest_ok_peak_bytes=math.nan)
        if len(oom):
            worst = oom.sort_values(["tokens", "batch"]).iloc[0]
            rec.update(smallest_oom=worst["key"], smallest_oom_tokens=int(worst["tokens"]))
        else:
            rec.update(smallest_oom=None, smallest_oom_tokens=math.nan)
        recs.append(rec)
    result: pd.DataFrame = pd.DataFrame(recs)
    return result


def as_dict(fit: PowerFit | QuadFit) -> dict[str, Any]:
    return asdict(fit)

"""Array helpers for tables of millions of rows with few distinct values.

Text columns are turned into integer codes of their distinct values once (Arrow hashes
each string once), work is done on the codes, and text is looked up per distinct value;
grouped sums keep the summation order pandas would use, so results agree to the last bit.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd


def text(v: Any) -> str | None:
    """A text cell: None when missing or empty, else ``str(v)``."""
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(v)


def factorized(col: pd.Series | None, n: int) -> tuple[np.ndarray, list[str | None]]:
    """Codes of a text column and its distinct values (:func:`text` of each).

    Code ``len(values) - 1`` is always None (the missing values, or an absent column of
    ``n`` rows), so ``values[code]`` never needs a bounds check."""
    if col is None:
        return np.zeros(n, dtype=np.int64), [None]
    codes, uniq = pd.factorize(col, sort=False)
    values = [text(u) for u in uniq]
    values.append(None)
    return np.where(codes < 0, len(values) - 1, codes).astype(np.int64), values


def combine_codes(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the distinct tuples of several code arrays (first occurrence order) and the
    row of each tuple's first occurrence."""
    key = np.zeros(len(codes[0]) if codes else 0, dtype=np.int64)
    for c in codes:
        key, _ = pd.factorize(key * (int(c.max()) + 1 if len(c) else 1) + c, sort=False)
    _, first = np.unique(key, return_index=True)  # codes are 0..k-1 in that order
    return key.astype(np.int64), first.astype(np.int64)


def group_sums(values: np.ndarray, gid: np.ndarray, n: int, min_count: int = 0) -> np.ndarray:
    """Sum of ``values`` per group (``gid``: the group number 0..n-1 of each row), missing
    values skipped, NaN for a group with fewer than ``min_count`` values: what
    ``Series.sum(min_count=...)`` gives for each group's rows, with the same (numpy
    pairwise) summation in row order, so the sums agree to the last bit."""
    order = np.argsort(gid, kind="stable")
    v = values[order].astype(np.float64)
    missing = np.isnan(v)
    v[missing] = 0.0
    count = np.bincount(gid[order][~missing], minlength=n)
    bounds = np.searchsorted(gid[order], np.arange(n + 1))
    out = np.array([v[a:b].sum() for a, b in itertools.pairwise(bounds.tolist())], dtype=float)
    out[count < min_count] = np.nan
    return out

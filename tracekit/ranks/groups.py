"""Group-by on numpy arrays for the cross-rank reduce.

The reduce groups small tables (a few hundred collectives, a few ranks) many times; a
pandas ``groupby`` costs about a millisecond whatever the table's size, which made the
reduce's fixed cost. :class:`Groups` sorts the keys once and answers the reductions the
reduce needs (max, min, sum, count, first, distinct count, median) with ``reduceat``,
giving the same values as the pandas calls they replace."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Groups:
    """Rows grouped by an integer key: ``keys`` (sorted, unique), ``order`` (the rows
    sorted by key, stable: each group's rows in their original order), ``starts`` (each
    group's first position in ``order``) and ``inverse`` (each row's group)."""

    keys: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    inverse: np.ndarray

    @classmethod
    def of(cls, key: np.ndarray) -> Groups:
        key = np.asarray(key, dtype=np.int64)
        order = np.argsort(key, kind="stable")
        keys, starts = np.unique(key[order], return_index=True)
        return cls(keys, order, starts, np.searchsorted(keys, key))

    @property
    def sizes(self) -> np.ndarray:
        return np.asarray(np.diff(np.append(self.starts, len(self.order))))

    def _sorted(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(np.asarray(values)[self.order])

    def max(self, values: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.asarray(values)[:0]
        return np.maximum.reduceat(self._sorted(values), self.starts)

    def min(self, values: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.asarray(values)[:0]
        return np.minimum.reduceat(self._sorted(values), self.starts)

    def sum(self, values: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.asarray(values)[:0]
        return np.add.reduceat(self._sorted(values), self.starts)

    def fsum(self, values: np.ndarray) -> np.ndarray:
        """Per group, the sum of float ``values`` (NaN skipped) in the rows' order with
        Kahan's compensation, as pandas' ``groupby().sum()`` adds them (bit for bit).
        ``values`` of shape (k, rows): k columns summed at once, (k, groups) returned.
        One step per position in the largest group; where the groups are of similar
        sizes, their values laid out as (k, groups, largest group), NaN after a group's
        own (a NaN is skipped), so that each step is a few whole-array operations."""
        v = np.asarray(values, dtype=np.float64)
        vs = np.atleast_2d(v)[:, self.order]
        sizes = self.sizes
        width = int(sizes.max()) if len(sizes) else 0
        total = np.zeros((len(vs), len(self.keys)))
        comp = np.zeros_like(total)
        if len(self.keys) * width <= 2 * len(self.order) + 64:
            pad = np.full((len(vs), len(self.keys), width), np.nan)
            row = np.repeat(np.arange(len(self.keys)), sizes)
            pad[:, row, np.arange(len(self.order)) - self.starts[row]] = vs
            for j in range(width):
                total, comp = _kahan(pad[:, :, j], total, comp)
            return total if v.ndim == 2 else total[0]
        for j in range(width):  # groups of very different sizes: the live ones only
            live = np.flatnonzero(sizes > j)
            total[:, live], comp[:, live] = _kahan(
                vs[:, self.starts[live] + j], total[:, live], comp[:, live]
            )
        return total if v.ndim == 2 else total[0]

    def fmean(self, values: np.ndarray) -> np.ndarray:
        """Per group, the mean of float ``values`` (NaN skipped; NaN where none), as
        pandas' ``groupby().mean()``: the Kahan sum over the count. ``values`` of shape
        (k, rows): k columns at once."""
        v = np.asarray(values, dtype=np.float64)
        n = self.sum((~np.isnan(np.atleast_2d(v))).astype(np.int64).T).T
        with np.errstate(invalid="ignore", divide="ignore"):
            got = np.where(n > 0, self.fsum(np.atleast_2d(v)) / np.maximum(n, 1), np.nan)
        return got if v.ndim == 2 else got[0]

    def first_row(self) -> np.ndarray:
        """Each group's first row (a position in the original rows)."""
        return np.asarray(self.order[self.starts])

    def first_where(self, mask: np.ndarray) -> np.ndarray:
        """Each group's first row where ``mask`` holds (-1: none)."""
        n = len(self.order)
        pos = np.where(self._sorted(mask), np.arange(n), n)
        if not len(self.keys):
            return pos[:0]
        first = np.minimum.reduceat(pos, self.starts)
        ends = self.starts + self.sizes
        return np.where(first < ends, self.order[np.minimum(first, n - 1)], -1)

    def nunique(self, codes: np.ndarray) -> np.ndarray:
        """Per group, how many distinct ``codes`` (integers; ``pd.factorize`` with
        ``use_na_sentinel=False`` counts a missing value as one)."""
        if not len(self.keys):
            return np.zeros(0, dtype=np.int64)
        g = self.inverse
        o = np.lexsort((np.asarray(codes), g))
        gs, cs = g[o], np.asarray(codes)[o]
        new = np.ones(len(o), dtype=bool)
        new[1:] = (gs[1:] != gs[:-1]) | (cs[1:] != cs[:-1])
        return np.bincount(gs[new], minlength=len(self.keys)).astype(np.int64)

    def median(self, values: np.ndarray) -> np.ndarray:
        """Per group, the median as float64, NaN skipped (NaN where none), as pandas'
        (the mean of the two middle values for an even count)."""
        v = np.asarray(values, dtype=np.float64)
        if not len(self.keys):
            return v[:0]
        o = np.lexsort((v, self.inverse))  # each group's values ascending, NaN last
        vs = v[o]
        n = self.sum((~np.isnan(v)).astype(np.int64))
        lo = self.starts + np.maximum(n - 1, 0) // 2
        hi = self.starts + n // 2
        hi = np.minimum(hi, len(vs) - 1)
        return np.asarray(np.where(n > 0, (vs[lo] + vs[hi]) / 2, np.nan))


def _kahan(x: np.ndarray, total: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of Kahan's compensated sum, adding ``x`` to ``total`` (``comp``: the
    compensation so far), as pandas adds; a NaN leaves its sum as it was."""
    y = x - comp
    t = total + y
    c = t - total - y
    ok = ~np.isnan(x)
    return np.where(ok, t, total), np.where(ok, np.where(np.isnan(c), 0.0, c), comp)


def nanmax(g: Groups, values: np.ndarray) -> np.ndarray:
    """Per group of ``g``, the largest value that is not NaN (NaN: none), as pandas'
    ``max()``."""
    if not len(g.keys):
        return np.asarray(values)[:0]
    return np.asarray(np.fmax.reduceat(np.asarray(values)[g.order], g.starts))


def series_median(v: np.ndarray) -> float:
    """pandas' ``Series.median()``: NaN skipped."""
    ok = ~np.isnan(v)
    return float(np.nanmedian(v[ok])) if ok.any() else math.nan


def series_mode(v: np.ndarray) -> int:
    """pandas' ``Series.mode().iloc[0]``: the smallest of the most frequent values."""
    uniq, counts = np.unique(v, return_counts=True)
    return int(uniq[np.argmax(counts)])


def value_counts(v: np.ndarray) -> list[tuple[int, int]]:
    """Each value of ``v`` (integers) and how often it occurs."""
    uniq, counts = np.unique(v, return_counts=True)
    return list(zip(uniq.tolist(), counts.tolist(), strict=True))


def lookup(keys: np.ndarray, table: dict[int, Any], default: Any) -> np.ndarray:
    """``table[k]`` for each of ``keys`` (integers >= 0), ``default`` where it has none:
    pandas' ``Series.map(table).fillna(default)`` through one array indexed by key."""
    k = np.asarray(keys, dtype=np.int64)
    vals = np.asarray(list(table.values()) or [default])
    top = max([int(k.max()) if len(k) else -1, *table]) + 1
    out = np.full(max(top, 1), default, dtype=np.result_type(vals, np.asarray(default)))
    if table:
        out[np.asarray(list(table), dtype=np.int64)] = vals
    return np.asarray(out[k])


def series_sum(v: np.ndarray) -> float:
    """pandas' ``Series.sum()`` of floats: NaN skipped (numpy's summation of the rest)."""
    x = np.asarray(v, dtype=np.float64)
    return float(np.where(np.isnan(x), 0.0, x).sum())


def series_mean(v: np.ndarray) -> float:
    """pandas' ``Series.mean()`` of floats: NaN skipped, NaN where none is left."""
    x = np.asarray(v, dtype=np.float64)
    n = int((~np.isnan(x)).sum())
    return series_sum(x) / n if n else math.nan


def ascending(v: np.ndarray) -> np.ndarray:
    """The order of pandas' ``sort_values()`` of ``v`` (numbers, in their own dtype; its
    default quicksort, ties as pandas leaves them, NaN last)."""
    x = np.asarray(v)
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(len(x), dtype=bool)
    idx = np.flatnonzero(~nan)
    return np.concatenate([idx[x[idx].argsort(kind="quicksort")], np.flatnonzero(nan)])


def descending(v: np.ndarray, kind: str = "quicksort") -> np.ndarray:
    """The order of pandas' ``sort_values(ascending=False, kind=kind)`` of ``v`` (numbers,
    sorted in their own dtype; ties as pandas leaves them, NaN last)."""
    x = np.asarray(v)
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(len(x), dtype=bool)
    idx = np.flatnonzero(~nan)[::-1]
    order = idx[x[idx].argsort(kind=cast(Any, kind))][::-1]
    return np.concatenate([order, np.flatnonzero(nan)])


def sorted_codes(col: pd.Series) -> tuple[np.ndarray, int]:
    """Each value's position among the column's distinct values in sorted order, a missing
    value after them all (``pd.factorize(col, sort=True, use_na_sentinel=False)``'s codes),
    and how many codes there are: on the values as numpy (objects), not through the
    column's Arrow dictionary encoding."""
    v = col.to_numpy()
    if v.dtype.kind in "iub":
        uniq, codes = np.unique(v, return_inverse=True)
        return np.asarray(codes, dtype=np.int64).reshape(-1), len(uniq)
    if v.dtype.kind == "f":
        uniq, codes = np.unique(v, return_inverse=True)  # NaN last, one value
        return np.asarray(codes, dtype=np.int64).reshape(-1), len(uniq)
    codes, uniq = pd.factorize(np.asarray(v, dtype=object), sort=True, use_na_sentinel=False)
    return np.asarray(codes, dtype=np.int64), len(uniq)  # hashed: no sort of every value


def ngroup(df: pd.DataFrame, by: list[str]) -> np.ndarray:
    """pandas' ``df.groupby(by, sort=True, dropna=False).ngroup()``: each row's group
    number, the groups in the sorted order of their keys (a missing value last)."""
    key = np.zeros(len(df), dtype=np.int64)
    for c in by:
        codes, n = sorted_codes(df[c])
        key = key * max(n, 1) + codes
    return np.asarray(Groups.of(key).inverse, dtype=np.int64)


def with_added(df: pd.DataFrame, cols: dict[str, Any]) -> pd.DataFrame:
    """``df`` with ``cols`` set as columns (``df.copy()`` then ``df[c] = v`` for each), in
    one concatenation where every name is new: each assignment to a wide frame costs about
    as much as its copy."""
    if any(c in df.columns for c in cols) or not len(cols):
        out: pd.DataFrame = df.copy()
        for c, v in cols.items():
            out[c] = v
        return out
    return cast(pd.DataFrame, pd.concat([df, pd.DataFrame(cols, index=df.index)], axis=1))

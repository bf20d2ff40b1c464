"""Sets of time intervals as sorted, disjoint ``(starts, ends)`` arrays (ns, int64).

The verdict needs three measures of the GPU timeline: the union of a set of activities,
the part of one set that another does not cover (communication with no compute beside
it) and the part of host spans during which the GPU runs nothing (waiting for input).
"""

from __future__ import annotations

import numpy as np

Spans = tuple[np.ndarray, np.ndarray]  # (starts, ends), sorted and disjoint


def merge(starts: np.ndarray, ends: np.ndarray) -> Spans:
    """The union of ``[starts[i], ends[i])`` as sorted, disjoint intervals."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]  # touching intervals merge
    group = np.cumsum(new) - 1
    out_e = np.zeros(int(new.sum()), dtype=np.int64)
    np.maximum.at(out_e, group, e)
    return s[new], out_e


def length(spans: Spans) -> int:
    return int((spans[1] - spans[0]).sum())


def covered_before(spans: Spans, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``: how much of ``spans`` lies before it."""
    starts, ends = spans
    t = np.asarray(t, dtype=np.int64)
    if not len(starts):
        return np.zeros(len(t), dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(ends - starts)))  # covered before interval i
    i = np.searchsorted(starts, t, side="right") - 1  # last interval starting at or before t
    inside = np.clip(t - starts[np.maximum(i, 0)], 0, (ends - starts)[np.maximum(i, 0)])
    out: np.ndarray = np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)
    return out


def intersection(a: Spans, b: Spans) -> int:
    """Length of the intersection of two merged sets."""
    if not len(a[0]) or not len(b[0]):
        return 0
    return int((covered_before(b, a[1]) - covered_before(b, a[0])).sum())


def uncovered(a: Spans, b: Spans) -> int:
    """Length of the part of ``a`` that ``b`` does not cover."""
    return length(a) - intersection(a, b)

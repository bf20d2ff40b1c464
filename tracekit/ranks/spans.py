"""Interval sets as sorted, disjoint ``(starts, ends)`` arrays (ns), beyond the union and
lengths of :mod:`tracekit.summary.intervals`: the parts of one set inside or outside
another (communication overlapped by compute, or exposed), and a coarsened set for
drawing."""

from __future__ import annotations

import numpy as np

import tracekit.summary.intervals as I

Spans = I.Spans


def _segments(a: Spans, b: Spans) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The elementary segments between every boundary of ``a`` and ``b``: (starts, ends,
    inside a, inside b)."""
    pts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]).astype(np.int64))
    if len(pts) < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, bool), np.zeros(0, bool)
    s, e = pts[:-1], pts[1:]

    def inside(x: Spans) -> np.ndarray:
        if not len(x[0]):
            return np.zeros(len(s), dtype=bool)
        i = np.searchsorted(x[0], s, side="right") - 1
        ok = i >= 0
        out = np.zeros(len(s), dtype=bool)
        out[ok] = e[ok] <= x[1][i[ok]]
        return out

    return s, e, inside(a), inside(b)


def difference(a: Spans, b: Spans) -> Spans:
    """The part of ``a`` that ``b`` does not cover."""
    s, e, in_a, in_b = _segments(a, b)
    keep = in_a & ~in_b
    return I.merge(s[keep], e[keep])


def intersect(a: Spans, b: Spans) -> Spans:
    """The part of ``a`` that ``b`` covers."""
    s, e, in_a, in_b = _segments(a, b)
    keep = in_a & in_b
    return I.merge(s[keep], e[keep])


def coarsen(x: Spans, gap: int) -> Spans:
    """``x`` with gaps shorter than ``gap`` closed (what a plot of that resolution shows)."""
    if not len(x[0]) or gap <= 0:
        return x
    s, e = I.merge(x[0], x[1] + gap)
    return s, e - gap

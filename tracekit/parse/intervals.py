"""Time intervals on threads, vectorized: nesting, "innermost interval enclosing t",
union length.

Time nesting on a thread is computed from the sorted start/end boundaries (depth = open
intervals), parents by a per-depth binary search, and "the innermost interval enclosing
time t" by a binary search followed by climbing parents until the interval contains t.
Pure numpy; the table builders (``tracekit.parse.ops`` ...) use these.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def thread_key(pid: I64, tid: I64) -> I64:
    """One int64 per (pid, tid) pair, order-preserving within a pid."""
    combined = (pid.astype(np.int64) << np.int64(32)) ^ (tid.astype(np.int64) & 0xFFFFFFFF)
    _, inv = np.unique(combined, return_inverse=True)
    return np.asarray(inv.reshape(-1), dtype=np.int64)


def nest(thread: I64, start: I64, dur: I64) -> tuple[I64, I64, I64]:
    """Time nesting of intervals on each thread.

    Returns ``order`` (indices sorted by thread, start, longest first), and for
    each interval its ``parent`` index (-1 for roots) and ``depth``.
    """
    n = len(start)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e.copy(), e.copy()
    order = np.lexsort((-dur, start, thread))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    end = start + dur
    zero = dur == 0
    # Boundaries: starts (type 1), ends (type 0: before starts at the same time; a zero-length
    # interval's end comes right after its own start so that equal-time instants are siblings).
    # 2n of them: keys are kept in the narrowest exact type (a 5 GB trace has 11 M).
    small = np.int32 if 2 * n < (1 << 31) and int(thread.max()) < (1 << 31) else np.int64
    b_thread = np.concatenate([thread, thread]).astype(small, copy=False)
    b_time = np.concatenate([start, end])
    del end
    b_type = np.concatenate([np.ones(n, dtype=np.int8), zero.astype(np.int8)])
    b_tie = np.empty(2 * n, dtype=small)
    np.multiply(rank, 2, out=b_tie[:n], casting="unsafe")
    np.add(b_tie[:n], 1, out=b_tie[n:])
    bo = np.lexsort((b_tie, b_type, b_time, b_thread))
    del b_tie, b_type, b_time, b_thread
    is_start = bo < n
    step = is_start.astype(np.int8)  # +1 at a start, -1 at an end
    step *= 2
    step -= 1
    cum = np.cumsum(step, dtype=np.int32)
    del step
    depth = np.empty(n, dtype=np.int64)
    depth[bo[is_start]] = cum[is_start] - 1
    depth = np.maximum(depth, 0)
    parent = np.full(n, -1, dtype=np.int64)
    pos = rank  # position in thread-major start order
    d_sorted = depth[order]
    for d in range(1, int(depth.max()) + 1 if n else 0):
        child = order[d_sorted == d]
        cand = order[d_sorted == d - 1]
        if len(child) == 0 or len(cand) == 0:
            continue
        k = np.searchsorted(pos[cand], pos[child]) - 1
        ok = k >= 0
        p = np.where(ok, cand[np.maximum(k, 0)], -1)
        ok &= thread[np.maximum(p, 0)] == thread[child]
        parent[child] = np.where(ok, p, -1)
    return order, parent, depth


def enclosing(
    order: I64, thread: I64, start: I64, end: I64, parent: I64, q_thread: I64, q_time: I64
) -> I64:
    """Index of the innermost interval on ``q_thread`` containing ``q_time`` (-1: none)."""
    m = len(q_time)
    if len(order) == 0 or m == 0:
        return np.full(m, -1, dtype=np.int64)
    # Sort key (thread, start) as one comparable pair via lexsort positions.
    key_t = thread[order]
    key_s = start[order]
    # searchsorted on two keys: find per thread block, then within it.
    t_lo = np.searchsorted(key_t, q_thread, side="left")
    t_hi = np.searchsorted(key_t, q_thread, side="right")
    res = np.full(m, -1, dtype=np.int64)
    has = t_hi > t_lo
    if not has.any():
        return res
    # Within each thread block, last start <= q_time: offset search by a per-thread shift.
    big = np.int64(1) << np.int64(62)
    base = key_s.min()
    span = max(int(key_s.max() - base), int(q_time.max() - base) if m else 0) + 1
    if (int(key_t.max()) + 2) * span < (1 << 62):
        comb = key_t.astype(np.int64) * np.int64(span) + (key_s - base)
        q = q_thread.astype(np.int64) * np.int64(span) + np.clip(q_time - base, -1, span - 1)
        k = np.searchsorted(comb, q, side="right") - 1
    else:  # enormous spans x many threads: one search per thread (not per query)
        k = np.full(m, -1, dtype=np.int64)
        for t in np.unique(q_thread[has]):
            sel = np.flatnonzero(q_thread == t)
            lo, hi = int(t_lo[sel[0]]), int(t_hi[sel[0]])
            k[sel] = lo + np.searchsorted(key_s[lo:hi], q_time[sel], side="right") - 1
    del big
    ok = has & (k >= t_lo) & (k < t_hi)
    cand = np.where(ok, order[np.clip(k, 0, len(order) - 1)], -1)
    # Climb while the candidate ends before q_time.
    for _ in range(256):
        bad = (cand >= 0) & (end[np.maximum(cand, 0)] < q_time)
        if not bad.any():
            break
        cand = np.where(bad, parent[np.maximum(cand, 0)], cand)
    res[:] = cand
    return res


def union_length(start: I64, end: I64) -> int:
    """Total length of the union of intervals."""
    if len(start) == 0:
        return 0
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    seg = np.cumsum(new) - 1
    seg_start = s[new]
    seg_end = np.zeros(len(seg_start), dtype=np.int64)
    np.maximum.at(seg_end, seg, e)
    return int((seg_end - seg_start).sum())


def climb_top(parent: I64, ok_parent: B) -> I64:
    """For each node, its outermost ancestor reachable through parents where ``ok_parent``."""
    top = np.arange(len(parent), dtype=np.int64)
    for _ in range(512):
        p = parent[top]
        move = (p >= 0) & ok_parent[np.maximum(p, 0)]
        if not move.any():
            break
        top = np.where(move, p, top)
    return top

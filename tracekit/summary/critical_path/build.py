"""The dependency graph of one training step, built from the parsed tables.

Chains (``tracekit.summary.critical_path.graph``):

* **a CPU thread**: its points are the starts and ends of its *busy intervals* (the union of
  its CPU operators and runtime calls) and of the runtime calls that launch GPU work or
  block; the chain edge between two points is the thread's time between them, split into
  ``cpu_op`` (inside an operator), ``cpu_launch`` (inside a launching runtime call),
  ``cpu_runtime`` (other runtime calls), ``cpu_sync`` (inside a blocking call),
  ``cpu_untraced`` (between operators: Python, framework code without an operator) and
  ``cpu_blocked`` (idle while another thread works, see below). The thread of the step's
  ``ProfilerStep#N`` annotation is the *main* chain, from the step's start to its end.
* **a GPU stream**: the start and end of each kernel, memcpy and memset launched in the
  step, in stream order: the kernel's duration (keyed by its class), then the gap to the
  next (``gpu_idle``). A stream whose previous activity (of an earlier step) precedes the
  step's first one starts with an *entry* point at that activity's end.

Cross edges:

* **launch** (``launch_latency``): the start of the runtime call -> the start of the
  kernel it launched (correlation id);
* **sync** (``sync_latency``): GPU work -> the end of a blocking call on the CPU:
  ``*Synchronize`` calls wait for the last activity launched before them on each stream
  that ended before they returned; a synchronous memcpy (``cudaMemcpy``, or an async one
  to pageable host memory) for its own copy (from host pageable memory: its start);
* **thread** (``thread_handoff``): a thread that resumes after an idle gap during which
  another thread of the process was busy at least half the time and finished, waited for
  it (the autograd engine's threads: backward starts on its own thread after the forward
  and the main thread resumes after it); a thread's first activity in the step follows
  the latest activity of the other threads before it;
* **stream wait** (``stream_wait``): ``cudaStreamWaitEvent`` -> the next activity launched
  from that thread waits for the last one launched before the matching
  ``cudaEventRecord`` on the same thread, when the two are on different streams;
* a kernel without a launch call in the step hangs off the step's start (``unexplained``).

Calibration: every edge has a modelled minimum weight (CPU time: its operator, runtime
and untraced time, without blocked or sync waits; launch latency: ``L0``, the 5th
percentile of the latencies of launches onto an idle stream; the gap between queued
kernels: ``G0``, the median gap between kernels launched before their predecessor ended;
sync, thread and stream waits: 0), capped at the observed difference. Of the edges into a
point, the one that explains its observed time best (the largest source time + minimum;
its own chain on a tie) is *binding* and carries the observed difference; the others keep
their minimum. Solved with every entry at its observed time, the graph reproduces every
observed time exactly; re-weighted, it predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.summary.critical_path.graph import CARRY, NEG, ORIGIN, Graph, _sorted_edges
from tracekit.summary.critical_path.tables import (
    CATEGORIES,
    CPU_BLOCKED,
    CPU_LAUNCH,
    CPU_OP,
    CPU_RUNTIME,
    CPU_SYNC,
    CPU_UNTRACED,
    GPU_IDLE,
    LAUNCH,
    MC_END,
    MC_NONE,
    QUEUE,
    RT_LAUNCH,
    RT_MEMCPY,
    RT_RECORD,
    RT_SYNC,
    RT_WAIT,
    STREAM_WAIT,
    SYNC,
    THREAD,
    UNEXPLAINED,
    WAITS,
    Prepared,
    step_keys,
)


@dataclass
class StepGraph:
    """One step's graph and the maps that what-ifs need (indices into the graph)."""

    step: int
    graph: Graph
    traced_ns: int  # max(cpu_dur, gpu_dur) of the step
    cpu_ns: int
    gpu_ns: int
    kernel_id: np.ndarray
    kernel_class: np.ndarray
    kernel_dur: np.ndarray
    kernel_lane: np.ndarray
    kernel_comp: np.ndarray  # component of each kernel's duration
    gap_comp: np.ndarray  # component of the GPU gap before it (-1: first without entry)
    launch_edge: np.ndarray  # cross edge index of its launch (-1)
    launch_comp: np.ndarray  # component of its launch call's CPU time (-1)
    kernel_inputs: np.ndarray  # tensor inputs of its operator (2 when unknown)
    l0: int  # modelled launch latency, ns
    g0: int  # modelled gap between queued kernels, ns
    counts: dict[str, int] = field(default_factory=dict)
    whole_trace: bool = False


@dataclass
class _Acc:
    """Points, chain components and cross edges while a step graph is built."""

    time: list[np.ndarray] = field(default_factory=list)
    chain_start: list[int] = field(default_factory=lambda: [0])
    names: list[str] = field(default_factory=list)
    # chain components: (point, key, ns, is_wait)
    c_pt: list[np.ndarray] = field(default_factory=list)
    c_key: list[np.ndarray] = field(default_factory=list)
    c_ns: list[np.ndarray] = field(default_factory=list)
    # cross edges: (src, dst, key, model ns)
    x_src: list[np.ndarray] = field(default_factory=list)
    x_dst: list[np.ndarray] = field(default_factory=list)
    x_key: list[np.ndarray] = field(default_factory=list)
    x_min: list[np.ndarray] = field(default_factory=list)
    no_bind: list[int] = field(default_factory=list)  # chain edges never binding (stand-ins)
    free: list[bool] = field(default_factory=list)  # chains without chain edges
    stand_in: list[int] = field(default_factory=list)  # entry points not in the trace

    @property
    def n(self) -> int:
        return self.chain_start[-1]

    def chain(self, times: np.ndarray, name: str, free: bool = False) -> int:
        base = self.n
        self.time.append(times.astype(np.int64))
        self.chain_start.append(base + len(times))
        self.names.append(name)
        self.free.append(free)
        return base

    def comps(self, pt: np.ndarray, key: np.ndarray | int, ns: np.ndarray) -> None:
        self.c_pt.append(np.asarray(pt, np.int64))
        self.c_key.append(np.broadcast_to(np.asarray(key, np.int64), np.shape(pt)).copy())
        self.c_ns.append(np.asarray(ns, np.int64))

    def time_of(self, point: int) -> int:
        c = int(np.searchsorted(np.asarray(self.chain_start), point, "right")) - 1
        return int(self.time[c][point - self.chain_start[c]])

    def edges(self, src: np.ndarray, dst: np.ndarray, key: int, wmin: np.ndarray) -> None:
        self.x_src.append(np.asarray(src, np.int64))
        self.x_dst.append(np.asarray(dst, np.int64))
        self.x_key.append(np.full(len(src), key, np.int64))
        self.x_min.append(np.asarray(wmin, np.int64))


def _cat(xs: list[np.ndarray], dtype: Any = np.int64) -> np.ndarray:
    return np.concatenate(xs).astype(dtype) if xs else np.zeros(0, dtype)


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, as sorted disjoint [start, end) (touching ones merged)."""
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _open(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Number of intervals [start, end) open at each x (starts, ends sorted)."""
    return np.searchsorted(starts, x, "right") - np.searchsorted(ends, x, "right")


def _busy_before(s: np.ndarray, e: np.ndarray, pre: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Busy time of disjoint sorted intervals before each x (pre: prefix sums of e - s)."""
    i = np.searchsorted(s, x, "right")
    out = pre[i].astype(np.int64)
    last = np.maximum(i - 1, 0)
    over = np.where(i > 0, np.maximum(e[last] - x, 0), 0)
    return out - over


@dataclass
class _Thread:
    code: int
    base: int
    pts: np.ndarray  # point times (sorted, unique)
    busy_s: np.ndarray
    busy_e: np.ndarray
    lo: int
    hi: int
    rows: np.ndarray  # runtime rows on this thread in the step
    r_s: np.ndarray  # their (clipped) start and end
    r_e: np.ndarray
    o_s: np.ndarray
    o_e: np.ndarray

    def point(self, times: np.ndarray) -> np.ndarray:
        return self.base + np.searchsorted(self.pts, times)


def build_step(P: Prepared, step: int, keys: list[str] | None = None) -> StepGraph:
    """The calibrated graph of one analysed step (module docstring)."""
    keys = keys or step_keys(P)
    srow = P.steps[P.steps["step"] == step].iloc[0]
    cpu_ts = int(srow["cpu_ts"])
    cpu_ns = int(srow["cpu_dur"])
    gpu_ns = 0 if pd.isna(srow["gpu_dur"]) else int(srow["gpu_dur"])
    acc = _Acc()
    blocking = P.rt_blocking
    threads = _cpu_points(P, acc, step, cpu_ts, cpu_ts + cpu_ns)
    rt_start = np.full(len(P.rt_ts), -1, np.int64)
    rt_end = np.full(len(P.rt_ts), -1, np.int64)
    for th in threads:
        rt_start[th.rows] = th.point(th.r_s)
        rt_end[th.rows] = th.point(th.r_e)
    blocked = _thread_edges(acc, threads)
    kidx = P.k_rows.get(step, np.zeros(0, np.int64))
    queue = _queue_sources(P, kidx, rt_end)
    split = np.full(len(P.rt_ts), -1, np.int64)
    long = P.rt_end[queue.rows] - P.rt_ts[queue.rows] > P.launch_cost
    split[queue.rows[long]] = P.rt_ts[queue.rows[long]] + P.launch_cost
    for th, gaps in zip(threads, blocked, strict=True):
        _cpu_components(P, acc, th, gaps, blocking, split)
    main = threads[0]
    entries = [(main.base, ORIGIN, main.base + len(main.pts) - 1, int(main.pts[0]))]
    gpu = _gpu_chains(P, acc, kidx, keys, entries)
    _queue_edges(P, acc, gpu, queue, rt_end, entries)
    _launch_edges(P, acc, kidx, gpu, rt_start, main.base, step)
    _sync_edges(P, acc, kidx, gpu, rt_end, blocking, step)
    _wait_edges(P, acc, kidx, gpu, step)
    g, comp_at, counts = _calibrate(acc, keys, entries, len(threads), P.g0)
    kc = comp_at(gpu.end_pt, None)
    gc = np.where(gpu.has_gap, comp_at(gpu.start_pt, keys.index(GPU_IDLE)), -1)
    lrow = P.k_rt[kidx]
    call_end = np.full(len(lrow), -1, np.int64)  # (no runtime rows: a damaged trace)
    call_end[lrow >= 0] = rt_end[lrow[lrow >= 0]]
    lc = np.where(call_end >= 0, comp_at(np.maximum(call_end, 0), keys.index(CPU_LAUNCH)), -1)
    le = _edge_into(g, gpu.start_pt, keys.index(LAUNCH))
    return StepGraph(
        step=step,
        graph=g,
        traced_ns=max(cpu_ns, gpu_ns),
        cpu_ns=cpu_ns,
        gpu_ns=gpu_ns,
        kernel_id=P.k_id[kidx],
        kernel_class=P.k_class[kidx],
        kernel_dur=P.k_end[kidx] - P.k_ts[kidx],
        kernel_lane=P.k_lane[kidx],
        kernel_comp=kc,
        gap_comp=gc,
        launch_edge=le,
        launch_comp=lc,
        kernel_inputs=P.k_inputs[kidx],
        l0=P.l0,
        g0=P.g0,
        counts=counts,
        whole_trace=P.whole_trace,
    )


def _cpu_points(P: Prepared, acc: _Acc, step: int, lo: int, hi: int) -> list[_Thread]:
    """One chain per CPU thread active in the step, the main thread first."""
    om = P.op_rows.get(step, np.zeros(0, np.int64))
    rm = P.rt_rows.get(step, np.zeros(0, np.int64))
    main = P.main_thread.get(step, -1)
    om_th, rm_th = P.op_thread[om], P.rt_thread[rm]
    active = np.unique(np.r_[om_th, rm_th]).tolist()
    order = [main] + [t for t in active if t != main]
    out: list[_Thread] = []
    anchor = np.isin(P.rt_kind[rm], (RT_LAUNCH, RT_SYNC, RT_MEMCPY))
    for code in order:
        o = om[om_th == code]
        sel = rm_th == code
        rows = rm[sel]
        o_s, o_e = P.op_ts[o], P.op_end[o]
        r_s, r_e = P.rt_ts[rows], P.rt_end[rows]
        if code == main:
            o_s, o_e, r_s, r_e = (np.clip(a, lo, hi) for a in (o_s, o_e, r_s, r_e))
        elif not len(o_s) and not len(r_s):
            continue
        bs, be = _merge(np.r_[o_s, r_s], np.r_[o_e, r_e])
        t_lo, t_hi = (lo, hi) if code == main else (int(bs[0]), int(be[-1]))
        an = anchor[sel]
        pts = np.unique(np.r_[bs, be, r_s[an], r_e[an], t_lo, t_hi])
        name = P.thread_name[code] + (" (main)" if code == main else "") if code >= 0 else "main"
        base = acc.chain(pts, name)
        out.append(_Thread(code, base, pts, bs, be, t_lo, t_hi, rows, r_s, r_e, o_s, o_e))
    return out


def _thread_edges(acc: _Acc, threads: list[_Thread]) -> list[np.ndarray]:
    """Handoffs between threads (module docstring); returns each thread's blocked gaps as
    an (n, 2) array of [start, end)."""
    blocked: list[np.ndarray] = []
    pre = [np.r_[0, np.cumsum(t.busy_e - t.busy_s)] for t in threads]
    for i, th in enumerate(threads):
        if i == 0:
            a = np.r_[th.lo, th.busy_e]
            b = np.r_[th.busy_s, th.hi]
        else:
            a, b = th.busy_e[:-1], th.busy_s[1:]
        keep = b > a
        a, b = a[keep], b[keep]
        best_e = np.full(len(a), -1, np.int64)
        best_u = np.full(len(a), -1, np.int64)
        for j, u in enumerate(threads):
            if j == i or not len(u.busy_e) or not len(a):
                continue
            k = np.searchsorted(u.busy_e, b, "right") - 1
            e = np.where(k >= 0, u.busy_e[np.maximum(k, 0)], -1)
            cov = _busy_before(u.busy_s, u.busy_e, pre[j], e) - _busy_before(
                u.busy_s, u.busy_e, pre[j], a
            )
            ok = (e > a) & (2 * cov >= (e - a)) & (e > best_e)
            best_e = np.where(ok, e, best_e)
            best_u = np.where(ok, j, best_u)
        hit = best_u >= 0
        for j in np.unique(best_u[hit]).tolist():
            m = best_u == j
            acc.edges(threads[j].point(best_e[m]), th.point(b[m]), _K[THREAD], np.zeros(m.sum()))
        blocked.append(np.c_[a[hit], b[hit]])
        if i > 0:  # the thread's first activity follows the others' latest before it
            b0 = th.busy_s[0]
            src, t_src = threads[0].base, threads[0].lo
            for j, u in enumerate(threads):
                k = np.searchsorted(u.busy_e, b0, "right") - 1
                if j != i and k >= 0 and u.busy_e[k] > t_src and u.busy_e[k] >= threads[0].lo:
                    src, t_src = int(u.point(u.busy_e[k : k + 1])[0]), int(u.busy_e[k])
            acc.edges(np.r_[src], np.r_[th.base], _K[THREAD], np.zeros(1))
    return blocked


_K = {c: i for i, c in enumerate(CATEGORIES)}


def _cpu_components(
    P: Prepared,
    acc: _Acc,
    th: _Thread,
    gaps: np.ndarray,
    blocking: np.ndarray,
    split: np.ndarray,
) -> None:
    """Split each chain edge of a thread into categories of CPU time (``split``: per
    runtime row, where a launch call that waited for the launch queue starts waiting)."""
    sp = split[th.rows]
    has_sp = sp >= 0
    x = np.unique(np.r_[th.pts, th.o_s, th.o_e, th.r_s, th.r_e, sp[has_sp]])
    x = x[(x >= th.lo) & (x <= th.hi)]
    if len(x) < 2:
        return
    at, dur = x[:-1], np.diff(x)
    kind = P.rt_kind[th.rows]
    blk = blocking[th.rows]
    launch = ~blk & ((kind == RT_LAUNCH) | (kind == RT_MEMCPY))
    cat = np.full(len(at), _K[CPU_UNTRACED], np.int64)

    def opened(sel: np.ndarray | None, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        if sel is not None:
            s, e = s[sel], e[sel]
        return _open(np.sort(s), np.sort(e), at) > 0

    if len(gaps):
        cat[opened(None, gaps[:, 0], gaps[:, 1])] = _K[CPU_BLOCKED]
    cat[opened(None, th.o_s, th.o_e)] = _K[CPU_OP]
    cat[opened(None, th.r_s, th.r_e)] = _K[CPU_RUNTIME]
    cat[opened(launch, th.r_s, th.r_e)] = _K[CPU_LAUNCH]
    cat[opened(blk, th.r_s, th.r_e)] = _K[CPU_SYNC]
    if has_sp.any():
        cat[opened(None, sp[has_sp], th.r_e[has_sp])] = _K[CPU_SYNC]
    pt = th.base + np.searchsorted(th.pts, x[1:], "left")
    nk = len(CATEGORIES) + 1
    code, inv = np.unique(pt * nk + cat, return_inverse=True)
    ns = np.bincount(inv, weights=dur).astype(np.int64)
    acc.comps(code // nk, code % nk, ns)


@dataclass
class _Gpu:
    start_pt: np.ndarray  # per kernel of the step (kidx order)
    end_pt: np.ndarray
    has_gap: np.ndarray  # a gap edge leads into its start
    lanes: dict[int, np.ndarray]  # lane -> positions in kidx (stream order)
    entry: dict[int, int]  # lane -> entry point


def _gpu_chains(
    P: Prepared,
    acc: _Acc,
    kidx: np.ndarray,
    keys: list[str],
    entries: list[tuple[int, int, int, int]],
) -> _Gpu:
    """One chain per (device, stream): kernel durations and the gaps between them."""
    n = len(kidx)
    start_pt = np.full(n, -1, np.int64)
    end_pt = np.full(n, -1, np.int64)
    has_gap = np.zeros(n, bool)
    lanes: dict[int, np.ndarray] = {}
    entry: dict[int, int] = {}
    lane = P.k_lane[kidx]
    cls_key = {c: i for i, c in enumerate(keys)}
    for ln in np.unique(lane).tolist():
        pos = np.flatnonzero(lane == ln)
        ki = kidx[pos]
        ts, end = P.k_ts[ki], P.k_end[ki]
        prev = int(P.k_prev_end[ki[0]])
        # the entry: the end of the lane's previous activity; without one in the trace a
        # stand-in G0 before the first start, released only by a previous copy
        head = prev if prev >= 0 else int(ts[0]) - P.g0
        times = np.r_[head, np.column_stack([ts, end]).ravel()]
        base = acc.chain(times, P.lane_name[ln])
        sp = base + 1 + 2 * np.arange(len(ki))
        start_pt[pos], end_pt[pos] = sp, sp + 1
        keyc = np.array([cls_key[str(c)] for c in P.k_class[ki]], np.int64)
        acc.comps(sp + 1, keyc, end - ts)
        acc.comps(sp, _K[GPU_IDLE], ts - np.r_[head, end[:-1]])
        has_gap[pos] = True
        lanes[ln] = pos
        entry[ln] = base
        entries.append((base, CARRY, int(sp[-1] + 1), head if prev >= 0 else int(NEG)))
        if prev < 0:
            acc.no_bind.append(int(sp[0]))
            acc.stand_in.append(base)
    return _Gpu(start_pt, end_pt, has_gap, lanes, entry)


@dataclass
class _Queue:
    rows: np.ndarray  # runtime rows of launch calls that may wait for the launch queue
    src: np.ndarray  # the activity (row of kernels) whose completion frees their slot
    pos: np.ndarray  # its position among the step's activities (-1: an earlier step)
    from_pos: np.ndarray  # for an earlier step: the same position in this step (-1: none)


def _queue_sources(P: Prepared, kidx: np.ndarray, rt_end: np.ndarray) -> _Queue:
    """Launch calls of the step and the activity Q launches earlier on the device whose
    completion frees their slot in the launch queue (only when it completed before the
    call returned); an activity of an earlier step is mapped to the same position one
    step back (the steady state's previous copy)."""
    none = np.zeros(0, np.int64)
    if not P.queue or not len(kidx):
        return _Queue(none, none, none, none)
    pos_of = np.full(len(P.k_ts), -1, np.int64)
    pos_of[kidx] = np.arange(len(kidx))
    rows, srcs, poss, froms = [], [], [], []
    for d, order in P.by_rank.items():
        mine = kidx[(P.k_device[kidx] == d) & (P.k_rank[kidx] >= 0)]
        mine = mine[rt_end[P.k_rt[mine]] >= 0]
        if not len(mine):
            continue
        rank = P.k_rank[mine]
        first, n = int(rank.min()), len(mine)
        sr = rank - P.queue
        ok = sr >= 0
        src = np.where(ok, order[np.maximum(sr, 0)], -1)
        call = P.k_rt[mine]
        ok &= P.k_end[np.maximum(src, 0)] <= P.rt_end[call]
        pos = np.where(ok, pos_of[np.maximum(src, 0)], -1)
        back = sr - first + n
        fr = np.where(
            ok & (pos < 0) & (back >= 0) & (back < n),
            pos_of[order[np.clip(first + back, 0, len(order) - 1)]],
            -1,
        )
        ok &= (pos >= 0) | (fr >= 0)
        rows.append(call[ok])
        srcs.append(src[ok])
        poss.append(pos[ok])
        froms.append(fr[ok])
    return _Queue(_cat(rows), _cat(srcs), _cat(poss), _cat(froms))


def _queue_edges(
    P: Prepared,
    acc: _Acc,
    gpu: _Gpu,
    q: _Queue,
    rt_end: np.ndarray,
    entries: list[tuple[int, int, int, int]],
) -> None:
    """Completion of the activity Q launches earlier -> end of the launch call (an
    activity of the previous step: through a point released by the previous copy)."""
    if not len(q.rows):
        return
    here = q.pos >= 0
    acc.edges(gpu.end_pt[q.pos[here]], rt_end[q.rows[here]], _K[QUEUE], np.zeros(here.sum()))
    back = ~here
    if back.any():
        t = P.k_end[q.src[back]]
        base = acc.chain(t, "launch queue (previous step)", free=True)
        pts = base + np.arange(len(t))
        frm = gpu.end_pt[q.from_pos[back]].tolist()
        for p, f, obs in zip(pts.tolist(), frm, t.tolist(), strict=True):
            entries.append((p, CARRY, f, obs))
        acc.edges(pts, rt_end[q.rows[back]], _K[QUEUE], np.zeros(back.sum()))


def _launch_edges(
    P: Prepared,
    acc: _Acc,
    kidx: np.ndarray,
    gpu: _Gpu,
    rt_start: np.ndarray,
    origin: int,
    step: int,
) -> None:
    """Launch call start -> kernel start; a kernel without a call in the step hangs off the
    step's start (weight: its observed offset)."""
    row = P.k_rt[kidx]
    ok = row >= 0
    ok[ok] &= rt_start[row[ok]] >= 0
    ts = P.k_ts[kidx]
    if ok.any():
        lat = ts[ok] - P.rt_ts[row[ok]]
        acc.edges(rt_start[row[ok]], gpu.start_pt[ok], _K[LAUNCH], np.minimum(lat, P.l0))
    if (~ok).any():
        off = ts[~ok] - acc.time_of(origin)
        acc.edges(np.full((~ok).sum(), origin), gpu.start_pt[~ok], _K[UNEXPLAINED], off)


def _launch_order(P: Prepared, kidx: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """When each kernel of a lane (stream order) was launched, made non-decreasing."""
    ki = kidx[pos]
    row = P.k_rt[ki]
    call = np.where(row >= 0, P.rt_ts[np.maximum(row, 0)], P.k_ts[ki])
    return np.maximum.accumulate(call)


def _sync_edges(
    P: Prepared,
    acc: _Acc,
    kidx: np.ndarray,
    gpu: _Gpu,
    rt_end: np.ndarray,
    blocking: np.ndarray,
    step: int,
) -> None:
    """GPU work -> the end of the blocking call that waited for it (module docstring)."""
    rows = P.rt_rows.get(step, np.zeros(0, np.int64))
    syncs = rows[(P.rt_kind[rows] == RT_SYNC) & (rt_end[rows] >= 0)]
    for ln, pos in gpu.lanes.items():
        if not len(syncs):
            break
        launched = _launch_order(P, kidx, pos)
        j = np.searchsorted(launched, P.rt_ts[syncs], "left") - 1
        prev = int(P.k_prev_end[kidx[pos[0]]])  # -1: the lane's entry is a stand-in
        src = np.where(j >= 0, gpu.end_pt[pos[np.maximum(j, 0)]], gpu.entry[ln])
        t_src = np.where(j >= 0, P.k_end[kidx[pos[np.maximum(j, 0)]]], prev)
        ok = ((j >= 0) | (prev >= 0)) & (t_src <= P.rt_end[syncs])
        acc.edges(src[ok], rt_end[syncs[ok]], _K[SYNC], np.zeros(ok.sum()))
    mc = P.k_memcpy[kidx]
    row = P.k_rt[kidx]
    sel = (mc != MC_NONE) & (row >= 0)
    sel[sel] &= rt_end[row[sel]] >= 0
    if sel.any():
        at_end = mc[sel] == MC_END
        src = np.where(at_end, gpu.end_pt[sel], gpu.start_pt[sel])
        t_src = np.where(at_end, P.k_end[kidx[sel]], P.k_ts[kidx[sel]])
        ok = t_src <= P.rt_end[row[sel]]
        acc.edges(src[ok], rt_end[row[sel][ok]], _K[SYNC], np.zeros(ok.sum()))


def _wait_edges(P: Prepared, acc: _Acc, kidx: np.ndarray, gpu: _Gpu, step: int) -> None:
    """cudaStreamWaitEvent: the next activity launched from the thread waits for the last
    one launched before the thread's preceding cudaEventRecord (other stream only)."""
    if len(gpu.lanes) < 2:
        return
    rows = P.rt_rows.get(step, np.zeros(0, np.int64))
    waits = rows[P.rt_kind[rows] == RT_WAIT]
    if not len(waits):
        return
    records = rows[P.rt_kind[rows] == RT_RECORD]
    row = P.k_rt[kidx]
    launched = np.flatnonzero(row >= 0)
    for th in np.unique(P.rt_thread[waits]).tolist():
        w = waits[P.rt_thread[waits] == th]
        rec = records[P.rt_thread[records] == th]
        mine = launched[P.rt_thread[row[launched]] == th]
        if not len(rec) or not len(mine):
            continue
        call = P.rt_ts[row[mine]]
        o = np.argsort(call, kind="stable")
        mine, call = mine[o], call[o]
        r = np.searchsorted(P.rt_ts[rec], P.rt_ts[w], "left") - 1  # the record before
        p = np.searchsorted(call, P.rt_ts[rec[np.maximum(r, 0)]], "left") - 1  # its producer
        c = np.searchsorted(call, P.rt_ts[w], "right")  # the consumer
        ok = (r >= 0) & (p >= 0) & (c < len(mine))
        prod, cons = mine[np.maximum(p, 0)], mine[np.minimum(c, len(mine) - 1)]
        ok &= P.k_lane[kidx[prod]] != P.k_lane[kidx[cons]]
        ok &= P.k_end[kidx[prod]] <= P.k_ts[kidx[cons]]
        acc.edges(gpu.end_pt[prod[ok]], gpu.start_pt[cons[ok]], _K[STREAM_WAIT], np.zeros(ok.sum()))


def _calibrate(
    acc: _Acc, keys: list[str], entries: list[tuple[int, int, int, int]], n_threads: int, g0: int
) -> tuple[Graph, Any, dict[str, int]]:
    """Bind each point to the edge that best explains its observed time (module docstring)
    and give every edge its calibrated weight. Returns the graph, a lookup
    ``comp_at(points, key)`` of chain components, and edge counts per kind."""
    T = np.concatenate(acc.time) if acc.time else np.zeros(0, np.int64)
    n = len(T)
    cs = np.asarray(acc.chain_start, np.int64)
    first = np.zeros(n, bool)
    first[cs[:-1][np.diff(cs) > 0]] = True
    for c in np.flatnonzero(acc.free).tolist():
        first[cs[c] : cs[c + 1]] = True
    c_pt, c_key, c_ns = _cat(acc.c_pt), _cat(acc.c_key), _cat(acc.c_ns)
    gap = c_key == _K[GPU_IDLE]
    wait = np.isin(c_key, [_K[k] for k in WAITS])
    c_min = np.where(wait, 0, np.where(gap, np.minimum(c_ns, g0), c_ns))
    wm_chain = np.bincount(c_pt, weights=c_min, minlength=n).astype(np.int64)
    src, dst, x_key = _cat(acc.x_src), _cat(acc.x_dst), _cat(acc.x_key)
    o = np.argsort(dst, kind="stable")
    src, dst, x_key = src[o], dst[o], x_key[o]
    obs_x = T[dst] - T[src]
    wm_x = np.minimum(_cat(acc.x_min)[o], obs_x)
    neg = np.iinfo(np.int64).min // 4
    val_x = T[src] + wm_x
    val_x[np.isin(src, np.asarray(acc.stand_in, np.int64))] = neg  # never binding
    best = np.full(n, neg, np.int64)
    if len(dst):
        np.maximum.at(best, dst, val_x)
    val_c = np.where(first, neg, np.r_[neg, T[:-1]] + wm_chain)
    val_c[np.asarray(acc.no_bind, np.int64)] = neg
    bind_c = ~first & (val_c >= best)
    cand = np.flatnonzero((val_x == best[dst]) & ~bind_c[dst])
    _, fi = np.unique(dst[cand], return_index=True)
    bind_x = np.zeros(len(dst), bool)
    bind_x[cand[fi]] = True
    ns_c = np.where(bind_c[c_pt], c_ns, c_min)
    ns_x = np.where(bind_x, obs_x, wm_x)
    ent = np.array(entries, np.int64).reshape(-1, 4)
    g = Graph(
        time=T,
        chain_start=cs,
        chain_name=list(acc.names),
        src=src,
        dst=dst,
        comp_edge=np.r_[c_pt, n + np.arange(len(dst))],
        comp_key=np.r_[c_key, x_key],
        comp_ns=np.r_[ns_c, ns_x].astype(np.int64),
        keys=keys,
        entry=ent[:, 0],
        entry_kind=ent[:, 1].astype(np.int8),
        entry_from=ent[:, 2],
        entry_obs=ent[:, 3],
        free=np.asarray(acc.free, bool),
    )
    g = _sorted_edges(g)
    code = c_pt * len(keys) + c_key
    co = np.argsort(code, kind="stable")
    po = np.argsort(c_pt, kind="stable")

    def comp_at(points: np.ndarray, key: int | None) -> np.ndarray:
        """Index of the chain component at each point with ``key`` (-1: none); ``None``:
        the point's first component (a kernel's end has exactly one)."""
        if not len(co):
            return np.full(len(points), -1, np.int64)
        if key is None:
            i = np.minimum(np.searchsorted(c_pt[po], points), len(po) - 1)
            return np.where(c_pt[po][i] == points, po[i], -1).astype(np.int64)
        want = np.asarray(points) * len(keys) + key
        i = np.minimum(np.searchsorted(code[co], want), len(co) - 1)
        return np.where(code[co][i] == want, co[i], -1).astype(np.int64)

    counts = {
        "points": n,
        "chains": len(cs) - 1,
        "cpu_threads": n_threads,
        **{f"{CATEGORIES[k]}_edges": int((x_key == k).sum()) for k in np.unique(x_key).tolist()},
        "binding_cross_edges": int(bind_x.sum()),
    }
    return g, comp_at, counts


def _edge_into(g: Graph, points: np.ndarray, key: int) -> np.ndarray:
    """The cross edge of ``key`` into each point (-1: none)."""
    out = np.full(len(points), -1, np.int64)
    comp_e = g.comp_edge - g.n_points
    sel = np.flatnonzero((comp_e >= 0) & (g.comp_key == key))
    e = comp_e[sel]
    d = g.dst[e]
    o = np.argsort(d, kind="stable")
    pos = np.searchsorted(d[o], points)
    pos = np.minimum(pos, max(len(o) - 1, 0))
    if len(o):
        hit = d[o][pos] == points
        out[hit] = e[o][pos][hit]
    return out

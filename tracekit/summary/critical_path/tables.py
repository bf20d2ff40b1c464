"""The trace's columns that the critical-path builder reads, prepared once per trace.

:func:`prepare` turns a parsed trace (``tracekit.parse.Trace``) into numpy arrays: CPU
operators and runtime calls with their thread, kind and step; GPU activities with their
(device, stream) lane, class, launching call, launch order and the end of the lane's
previous activity; per step its rows. It also measures what the graph's model needs from
the whole trace: the launch latency ``L0``, the gap between queued kernels ``G0``, the
median launch-call cost and the launch-queue depth ``Q`` (``tracekit.summary.critical_path.build``
uses them; docs/critical-path.md defines them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.summary.steps import LAUNCH_APIS

CPU_OP = "cpu_op"
CPU_LAUNCH = "cpu_launch"
CPU_RUNTIME = "cpu_runtime"
CPU_SYNC = "cpu_sync"
CPU_UNTRACED = "cpu_untraced"
CPU_BLOCKED = "cpu_blocked"
THREAD = "thread_handoff"
LAUNCH = "launch_latency"
GPU_IDLE = "gpu_idle"
STREAM_WAIT = "stream_wait"
SYNC = "sync_latency"
QUEUE = "launch_queue"
UNEXPLAINED = "unexplained"
CATEGORIES = [
    CPU_OP,
    CPU_LAUNCH,
    CPU_RUNTIME,
    CPU_SYNC,
    CPU_UNTRACED,
    CPU_BLOCKED,
    THREAD,
    LAUNCH,
    GPU_IDLE,
    STREAM_WAIT,
    SYNC,
    QUEUE,
    UNEXPLAINED,
]
HOST = (CPU_OP, CPU_LAUNCH, CPU_RUNTIME, CPU_SYNC, CPU_UNTRACED, CPU_BLOCKED)
WAITS = (CPU_SYNC, CPU_BLOCKED)  # CPU time that is a wait: modelled as 0 unless binding

SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
)
WAIT_CALLS = ("cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent")
RECORD_CALLS = ("cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "hipEventRecord")

MIN_QUEUE = 64  # a smaller "queue depth" is not the launch queue filling
L0_DEFAULT = 5_000  # ns: launch latency when the trace has no launch onto an idle stream
G0_DEFAULT = 1_000  # ns: gap between queued kernels when the trace has none

# runtime call kinds
RT_OTHER, RT_LAUNCH, RT_SYNC, RT_MEMCPY, RT_WAIT, RT_RECORD = range(6)
# how a memcpy's call waits for its copy: not, for its end, for its start
MC_NONE, MC_END, MC_START = range(3)


@dataclass
class Prepared:
    """The columns the builder reads, as numpy arrays (see :func:`prepare`)."""

    op_thread: np.ndarray
    op_ts: np.ndarray
    op_end: np.ndarray
    op_step: np.ndarray
    rt_thread: np.ndarray
    rt_ts: np.ndarray
    rt_end: np.ndarray
    rt_step: np.ndarray
    rt_kind: np.ndarray
    rt_blocking: np.ndarray  # the call blocks the CPU (sync, waiting memcpy)
    op_rows: dict[int, np.ndarray]  # step -> its rows (sorted), of ops / runtime / kernels
    rt_rows: dict[int, np.ndarray]
    k_rows: dict[int, np.ndarray]
    k_id: np.ndarray
    k_lane: np.ndarray  # (device, stream) code
    k_ts: np.ndarray
    k_end: np.ndarray
    k_step: np.ndarray
    k_rt: np.ndarray  # row of runtime (-1)
    k_class: np.ndarray  # str
    k_memcpy: np.ndarray  # MC_*
    k_prev_end: np.ndarray  # end of the previous activity on the lane (-1: none)
    k_inputs: np.ndarray  # tensor inputs of the launching operator (2 when unknown)
    k_rank: np.ndarray  # launch order among the device's activities with a call (-1)
    by_rank: dict[int, np.ndarray]  # device -> activity rows in launch order
    k_device: np.ndarray
    queue: int  # launch-queue depth seen in the trace (0: the queue never filled)
    launch_cost: int  # median duration of a launching call, ns
    lane_name: list[str]
    thread_name: list[str]
    steps: pd.DataFrame
    main_thread: dict[int, int]  # step -> thread code of its ProfilerStep annotation
    l0: int
    g0: int
    whole_trace: bool


def _kind_of(names: pd.Series) -> np.ndarray:
    cat = names.astype("category")
    cats = [str(c) for c in cat.cat.categories]
    kinds = np.full(len(cats), RT_OTHER, np.int8)
    for i, c in enumerate(cats):
        if c in LAUNCH_APIS or "LaunchKernel" in c or c.startswith(("cudaMemset", "cuMemset")):
            kinds[i] = RT_LAUNCH
        elif c in SYNC_CALLS:
            kinds[i] = RT_SYNC
        elif c.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy")):
            kinds[i] = RT_MEMCPY
        elif c in WAIT_CALLS:
            kinds[i] = RT_WAIT
        elif c in RECORD_CALLS:
            kinds[i] = RT_RECORD
    codes = cat.cat.codes.to_numpy()
    return np.where(codes >= 0, kinds[np.maximum(codes, 0)], RT_OTHER).astype(np.int8)


def _memcpy_wait(
    kinds: pd.Series, names: pd.Series, rt_names: pd.Series, row: np.ndarray
) -> np.ndarray:
    """How the launching call waits for each activity (MC_*): a memcpy to pageable host
    memory (or any memcpy from a call without 'Async') waits for its end; one from pageable
    memory to the device for its start."""
    out = np.full(len(kinds), MC_NONE, np.int8)
    mc = np.flatnonzero((kinds == "memcpy").to_numpy(dtype=bool))
    if not len(mc):
        return out
    nm = names.iloc[mc].to_numpy(dtype=object)
    r = row[mc]
    caller = np.full(len(mc), "", object)
    caller[r >= 0] = rt_names.iloc[r[r >= 0]].to_numpy(dtype=object)
    for j, i in enumerate(mc.tolist()):
        n, c = str(nm[j]), str(caller[j])
        if "-> Pageable" in n or (c and "Async" not in c):
            out[i] = MC_END
        elif "Pageable ->" in n:
            out[i] = MC_START
    return out


def _tensor_inputs(dims: pd.Series) -> np.ndarray:
    """Tensor inputs of each kernel's operator, from its input shapes (a scalar or a
    missing input is ``[]``; a tensor list counts its tensors); 2 where unknown."""
    codes, uniq = pd.factorize(dims)
    counts = np.full(len(uniq) + 1, 2.0)
    for i, text in enumerate(uniq):
        try:
            v = json.loads(text)
        except (TypeError, ValueError):
            continue
        n = 0
        for x in v if isinstance(v, list) else []:
            if isinstance(x, list) and x and isinstance(x[0], list):
                n += sum(1 for y in x if isinstance(y, list) and y)
            elif isinstance(x, list) and x:
                n += 1
        counts[i] = max(n, 1)
    return counts[np.where(codes >= 0, codes, len(uniq))]


def prepare(trace: Any, kernel_class: np.ndarray | None = None) -> Prepared:
    """The arrays :func:`build_step` needs, computed once for all steps. ``trace``: a
    ``tracekit.parse.Trace``; ``kernel_class``: the class of each row of
    ``trace.kernels`` (default: its ``kind``)."""
    o = trace.ops
    rt = trace.runtime
    k = trace.kernels
    is_op = (o["category"] == "cpu_op").to_numpy(dtype=bool)
    key = np.r_[_thread_key(o), _thread_key(rt)]
    codes, uniq = pd.factorize(key)
    all_thread, rt_thread = codes[: len(o)], codes[len(o) :]
    op_thread = all_thread[is_op]
    tnames = [f"thread {int(u) & 0xFFFFFFFF}" for u in uniq]
    o_ts = o["ts"].to_numpy(np.int64)
    o_end = o_ts + o["dur"].to_numpy(np.int64)
    o_step = o["step"].to_numpy(np.int64)
    rt_step = rt["step"].to_numpy(np.int64)
    steps = trace.steps[trace.steps["step"] >= 0].sort_values("step")
    main = _main_threads(o, steps, all_thread, rt_thread, rt_step)
    rt_kind = _kind_of(rt["name"])
    # lanes: (device, stream)
    lane_key = (
        k["device"].astype(np.int64).to_numpy() * (1 << 40)
        + k["stream"].astype(np.int64).to_numpy()
    )
    lane, lanes = pd.factorize(lane_key)
    lane_name = [f"gpu {int(v) >> 40} stream {int(v) & ((1 << 40) - 1)}" for v in lanes]
    kts = k["ts"].to_numpy(np.int64)
    kend = kts + k["dur"].to_numpy(np.int64)
    order = np.lexsort((kts, lane))
    prev = np.full(len(k), -1, np.int64)
    if len(order) > 1:
        same = lane[order[1:]] == lane[order[:-1]]
        prev[order[1:][same]] = kend[order[:-1][same]]
    # runtime_id is the runtime table's row id (rows in runtime_id order)
    rid = k["runtime_id"].to_numpy(np.int64)
    rt_ids = rt["runtime_id"].to_numpy(np.int64)
    row = np.full(len(k), -1, np.int64)
    if len(rt_ids):
        pos = np.searchsorted(rt_ids, rid)
        ok = (rid >= 0) & (pos < len(rt_ids))
        ok[ok] &= rt_ids[pos[ok]] == rid[ok]
        row[ok] = pos[ok]
    cls = np.asarray(kernel_class if kernel_class is not None else k["kind"].to_numpy(), object)
    l0, g0 = _constants(kts, kend, lane, prev, row, rt["ts"].to_numpy(np.int64))
    dev = k["device"].astype(np.int64).to_numpy()
    rank, by_rank = _ranks(dev, row, rt["ts"].to_numpy(np.int64))
    rdur = (rt["dur"].to_numpy(np.int64))[row[row >= 0]]
    cost = int(np.median(rdur)) if len(rdur) else 0
    queue = _queue_depth(rank, by_rank, dev, row, rt, kend, cost)
    whole = bool(len(steps) == 1 and str(steps["name"].iloc[0]).startswith("("))
    kstep = k["step"].to_numpy(np.int64)
    k_memcpy = _memcpy_wait(k["kind"], k["name"], rt["name"], row)
    return Prepared(
        op_thread=op_thread,
        op_ts=o_ts[is_op],
        op_end=o_end[is_op],
        op_step=o_step[is_op],
        rt_thread=rt_thread,
        rt_ts=rt["ts"].to_numpy(np.int64),
        rt_end=(rt["ts"] + rt["dur"]).to_numpy(np.int64),
        rt_step=rt_step,
        op_rows=_rows_by_step(o_step[is_op]),
        rt_rows=_rows_by_step(rt_step),
        k_rows=_rows_by_step(kstep),
        rt_kind=rt_kind,
        rt_blocking=_blocking_rows(rt_kind, k_memcpy, row),
        k_id=k["kernel_id"].to_numpy(np.int64),
        k_lane=lane.astype(np.int64),
        k_ts=kts,
        k_end=kend,
        k_step=kstep,
        k_rt=row,
        k_class=cls,
        k_memcpy=k_memcpy,
        k_prev_end=prev,
        k_rank=rank,
        by_rank=by_rank,
        k_device=dev,
        queue=queue,
        launch_cost=cost,
        k_inputs=_tensor_inputs(k["op_input_dims"])
        if "op_input_dims" in k
        else np.full(len(k), 2.0),
        lane_name=lane_name,
        thread_name=tnames,
        steps=steps,
        main_thread=main,
        l0=l0,
        g0=g0,
        whole_trace=whole,
    )


def _thread_key(df: pd.DataFrame) -> np.ndarray:
    pid = df["pid"].to_numpy(np.int64)
    out: np.ndarray = pid * (1 << 32) + (df["tid"].to_numpy(np.int64) & 0xFFFFFFFF)
    return out


def _rows_by_step(step: np.ndarray) -> dict[int, np.ndarray]:
    """Step -> the rows of that step, in row order (one sort for all steps)."""
    o = np.argsort(step, kind="stable")
    s = step[o]
    cut = np.flatnonzero(np.diff(s)) + 1
    return {int(v[0]): r for v, r in zip(np.split(s, cut), np.split(o, cut), strict=True) if len(v)}


def _main_threads(
    o: pd.DataFrame,
    steps: pd.DataFrame,
    all_thread: np.ndarray,
    rt_thread: np.ndarray,
    rt_step: np.ndarray,
) -> dict[int, int]:
    """Step -> the thread of its ProfilerStep annotation (without one: the thread with most
    runtime calls in the step, else of the first operator)."""
    ann = np.flatnonzero((o["category"] == "user_annotation").to_numpy(dtype=bool))
    names = o["name"].iloc[ann].to_numpy(dtype=object)
    a_step = o["step"].to_numpy(np.int64)[ann]
    main: dict[int, int] = {}
    for s, nm in zip(steps["step"].tolist(), steps["name"].tolist(), strict=True):
        hit = ann[(a_step == s) & (names == nm)]
        if len(hit):
            main[int(s)] = int(all_thread[hit[0]])
        elif len(rt_thread):
            th = rt_thread[rt_step == s]
            main[int(s)] = int(np.bincount(th).argmax()) if len(th) else int(rt_thread[0])
        elif len(all_thread):
            main[int(s)] = int(all_thread[0])
    return main


def _ranks(
    dev: np.ndarray, row: np.ndarray, rt_ts: np.ndarray
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Each activity's position in its device's launch order (by call start; -1 without a
    call), and per device the activity rows in that order."""
    rank = np.full(len(dev), -1, np.int64)
    by: dict[int, np.ndarray] = {}
    has = np.flatnonzero(row >= 0)
    for d in np.unique(dev[has]).tolist():
        idx = has[dev[has] == d]
        o = idx[np.argsort(rt_ts[row[idx]], kind="stable")]
        rank[o] = np.arange(len(o))
        by[int(d)] = o
    return rank, by


def _queue_depth(
    rank: np.ndarray,
    by: dict[int, np.ndarray],
    dev: np.ndarray,
    row: np.ndarray,
    rt: pd.DataFrame,
    kend: np.ndarray,
    cost: int,
) -> int:
    """The launch-queue depth Q when the trace shows it filling, else 0.

    A launch call that blocks (5x the median call, at least 50 us) returns when a slot
    frees: just after an earlier activity of the device completes. Q is the median
    distance in launch order between the call and the latest activity that ended before it
    returned (CUDA: 1022 on the V100 example trace); kept when at least 10 kernel or
    memset launches blocked, half of them agree with it to within 2 and it is at least
    :data:`MIN_QUEUE`."""
    has = np.flatnonzero(row >= 0)
    if not len(has):
        return 0
    ts = rt["ts"].to_numpy(np.int64)[row[has]]
    end = ts + rt["dur"].to_numpy(np.int64)[row[has]]
    launching = _kind_of(rt["name"])[row[has]] == RT_LAUNCH
    blocked = has[((end - ts) > max(5 * cost, 50_000)) & launching]
    if len(blocked) < 10:
        return 0
    qs = []
    for d, idx in by.items():
        b = blocked[dev[blocked] == d]
        if not len(b):
            continue
        e = kend[idx]
        o = np.argsort(e, kind="stable")
        call_end = ts[np.searchsorted(has, b)] + (end - ts)[np.searchsorted(has, b)]
        j = np.searchsorted(e[o], call_end, "right") - 1
        ok = j >= 0
        qs.append(rank[b[ok]] - rank[idx[o[j[ok]]]])
    q = np.concatenate(qs) if qs else np.zeros(0, np.int64)
    if len(q) < 10:
        return 0
    med = int(np.median(q))
    return med if med >= MIN_QUEUE and (np.abs(q - med) <= 2).mean() >= 0.5 else 0


def _constants(
    kts: np.ndarray,
    kend: np.ndarray,
    lane: np.ndarray,
    prev: np.ndarray,
    row: np.ndarray,
    rt_ts: np.ndarray,
) -> tuple[int, int]:
    """``L0``: 5th percentile of launch latency onto an idle stream; ``G0``: median gap
    between a kernel and its predecessor when it was launched before that one ended."""
    has = row >= 0
    call = np.where(has, rt_ts[np.maximum(row, 0)] if len(rt_ts) else 0, 0)
    idle = has & ((prev < 0) | (call >= prev))
    lat = (kts - call)[idle]
    lat = lat[lat > 0]
    l0 = int(np.percentile(lat, 5)) if len(lat) >= 10 else L0_DEFAULT
    queued = has & (prev >= 0) & (call < prev)
    gap = (kts - prev)[queued]
    gap = gap[gap >= 0]
    g0 = int(np.median(gap)) if len(gap) >= 10 else G0_DEFAULT
    return l0, g0


def step_keys(P: Prepared) -> list[str]:
    """The graph's keys: the categories, then the kernel classes of the trace."""
    classes = sorted(str(c) for c in pd.unique(P.k_class))
    return CATEGORIES + [c for c in classes if c not in CATEGORIES]


def _blocking_rows(rt_kind: np.ndarray, k_memcpy: np.ndarray, k_rt: np.ndarray) -> np.ndarray:
    """Runtime rows that block the CPU: synchronisations and waiting memcpy calls."""
    b: np.ndarray = rt_kind == RT_SYNC
    b[k_rt[(k_memcpy != MC_NONE) & (k_rt >= 0)]] = True
    return b

"""Assemble the accumulated columns into the schema's tables.

All joins are vectorized: time nesting on a thread is computed from the sorted
start/end boundaries (depth = open intervals), parents by a per-depth binary
search, and "the innermost operator enclosing time t" by a binary search
followed by climbing parents until the interval contains t.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import TraceError
from tracekit.parse import events as C
from tracekit.parse.columns import Accumulator
from tracekit.schema import ARROW, SCHEMA_VERSION

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_BWD = "autograd::engine::evaluate_function"


@dataclass
class Tables:
    kernels: pa.Table
    ops: pa.Table
    memory: pa.Table
    steps: pa.Table
    runtime: pa.Table
    meta: dict[str, Any] = field(default_factory=dict)

    def items(self) -> list[tuple[str, pa.Table]]:
        return [
            ("kernels", self.kernels),
            ("ops", self.ops),
            ("memory", self.memory),
            ("steps", self.steps),
            ("runtime", self.runtime),
        ]


# -- interval helpers ---------------------------------------------------------------------------


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


# -- build ----------------------------------------------------------------------------------------


def _arr(acc: Accumulator, kind: int, name: str, n: int, dtype: Any = np.int64) -> Any:
    """The column ``name`` of ``kind`` (zeros or nulls if absent), freed in ``acc``: each
    accumulated column is read once."""
    col = acc.pop(kind, name)
    if col is None:
        return np.zeros(n, dtype=dtype) if dtype is not None else pa.nulls(n, pa.string())
    return col


def _take(col: Any, idx: I64) -> Any:
    if isinstance(col, np.ndarray):
        return col[idx]
    col = _dense(col)
    return col.take(pa.array(idx)) if len(idx) else col.slice(0, 0)


def _take_nullable(col: Any, idx: I64) -> Any:
    """Take with -1 meaning null."""
    if len(col) == 0:
        return pa.nulls(len(idx), col.type)
    return col.take(pa.array(idx, mask=idx < 0))


def _dense(col: Any) -> Any:
    """One contiguous array (dictionary chunks are unified)."""
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _str_test(col: Any, fn: Any) -> B:
    """Boolean numpy result of a string predicate, evaluated once per distinct value for
    dictionary arrays; null is False."""
    arr = _dense(col)
    res = fn(arr.dictionary).take(arr.indices) if pa.types.is_dictionary(arr.type) else fn(arr)
    return np.asarray(pc.fill_null(res, False).to_numpy(zero_copy_only=False), dtype=bool)


def _steps_of(ts: I64, s_start: I64, s_end: I64, s_num: I64) -> npt.NDArray[np.int32]:
    if len(s_start) == 0:
        return np.full(len(ts), -1, dtype=np.int32)
    k = np.searchsorted(s_start, ts, side="right") - 1
    ok = (k >= 0) & (ts < s_end[np.maximum(k, 0)])
    return np.where(ok, s_num[np.maximum(k, 0)], -1).astype(np.int32)


def _labels(codes: npt.NDArray[np.int8], names: dict[int, str], default: str) -> pa.Array:
    """String column: ``names[code]``, else ``default``; taken from the few distinct labels
    (building a numpy string array and converting it costs ~10x more)."""
    size = max([*names, int(codes.max()) if len(codes) else 0]) + 1
    lookup = pa.array([names.get(k, default) for k in range(size)], type=pa.string())
    # Dictionary-encoded: _table casts it to plain strings unless the build is lazy.
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), lookup)


def _table(name: str, cols: dict[str, Any], lazy: bool = False) -> pa.Table:
    """The table in the schema's types; with ``lazy``, dictionary-encoded string columns
    stay dictionary-encoded (millions of repeated operator and kernel names would take
    gigabytes as plain strings): :func:`materialize` or a sliced cast turns them into the
    schema's type."""
    schema = ARROW[name]
    arrays = []
    for f in schema:
        v = cols[f.name]
        arr = pa.array(v, type=f.type) if isinstance(v, np.ndarray) else v
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        keep = lazy and pa.types.is_dictionary(arr.type) and arr.type.value_type == f.type
        if arr.type != f.type and not keep:
            arr = arr.cast(f.type)
        arrays.append(arr)
    if lazy:
        return pa.Table.from_arrays(arrays, names=schema.names)
    return pa.Table.from_arrays(arrays, schema=schema)


def materialize(name: str, table: pa.Table) -> pa.Table:
    """``table`` (possibly from a lazy build) in exactly the schema's types."""
    schema = ARROW[name]
    return table if table.schema.equals(schema) else table.cast(schema)


def _options(header: dict[str, Any], seen: dict[str, bool]) -> dict[str, bool]:
    """Profiler options: as declared in the trace header (PyTorch >= 2.4 writes
    record_shapes/profile_memory/with_flops there), else as seen in the events."""
    return {
        k: bool(header[k]) if isinstance(header.get(k), (int, bool)) else v for k, v in seen.items()
    }


def build(
    acc: Accumulator,
    header: dict[str, Any],
    source: str,
    on_table: Callable[[str, pa.Table], None] | None = None,
    *,
    lazy: bool = False,
    release: bool = False,
) -> Tables:
    """The schema's tables from the accumulated columns. ``on_table(name, table)`` is
    called as soon as each table is complete (the caller can write it while the next
    ones are built). The accumulator's columns are freed as their tables are built.
    ``lazy``: string columns may stay dictionary-encoded (see :func:`_table`). ``release``:
    the result holds empty tables and only ``on_table`` gets the data (a writer frees each
    table once written)."""
    held: dict[str, pa.Table] = {}

    def ready(name: str, table: pa.Table) -> None:
        if on_table is not None:
            on_table(name, table)
        held[name] = ARROW[name].empty_table() if release else table

    n_op = acc.count(C.OP)
    gpu_counts = {k: acc.count(k) for k in (C.KERNEL, C.MEMCPY, C.MEMSET)}
    n_k = sum(gpu_counts.values())
    n_rt = acc.count(C.RUNTIME)
    if n_op == 0 and n_k == 0 and n_rt == 0:
        raise TraceError(
            f"{source}: not a PyTorch profiler trace: no cpu_op, kernel or runtime events"
        )

    # Trace start: earliest timestamp of any timed event.
    starts = [
        acc.column(k, "ts")
        for k in (C.OP, C.KERNEL, C.MEMCPY, C.MEMSET, C.RUNTIME, C.MEMORY, C.PYMODULE, C.GPU_ANNOT)
    ]
    t0 = int(min(int(s.min()) for s in starts if s is not None and len(s)))
    del starts

    # ---- ops ----
    o_ts = _arr(acc, C.OP, "ts", 0) - t0
    o_dur = _arr(acc, C.OP, "dur", 0)
    o_pid = _arr(acc, C.OP, "pid", 0)
    o_tid = _arr(acc, C.OP, "tid", 0)
    o_cat = _arr(acc, C.OP, "category", 0, np.int8)
    o_name = _dense(acc.pop(C.OP, "name")) if n_op else pa.array([], pa.string())
    # op_id order: start time, longest first (a parent precedes its children).
    perm = np.lexsort((-o_dur, o_ts)) if n_op else np.zeros(0, dtype=np.int64)
    o_ts, o_dur, o_pid, o_tid, o_cat = (a[perm] for a in (o_ts, o_dur, o_pid, o_tid, o_cat))
    o_name = _take(o_name, perm)
    all_pid = [o_pid]
    all_tid = [o_tid]
    thr_names = ("RUNTIME", "MEMORY", "PYMODULE", "FLOW_END")
    extra = {
        k: (acc.column(getattr(C, k), "pid"), acc.column(getattr(C, k), "tid")) for k in thr_names
    }
    for p, t in extra.values():
        if p is not None:
            all_pid.append(p)
            all_tid.append(t)
    keys = thread_key(np.concatenate(all_pid), np.concatenate(all_tid))
    splits = np.cumsum([len(p) for p in all_pid])[:-1]
    key_parts = np.split(keys, splits)
    o_thr = key_parts[0]
    thr = {}
    i = 1
    for k, (p, _t) in extra.items():
        if p is not None:
            thr[k] = key_parts[i]
            i += 1
    order, parent, depth = nest(o_thr, o_ts, o_dur)
    o_end = o_ts + o_dur

    # Steps (CPU spans of ProfilerStep#N).
    is_step = (
        _str_test(o_name, lambda a: pc.match_substring_regex(a, _STEP.pattern))
        if n_op
        else np.zeros(0, bool)
    )
    si = np.flatnonzero(is_step & (o_cat == C.ANNOT))
    if len(si):
        s_names_all = o_name.take(pa.array(si)).to_pylist()
        s_num = np.asarray(
            [int(_STEP.match(nm).group(1)) for nm in s_names_all],  # type: ignore[union-attr]
            dtype=np.int64,
        )
        so = np.argsort(o_ts[si], kind="stable")
        si, s_num = si[so], s_num[so]
        s_start, s_end = o_ts[si], o_end[si]
        s_names = [s_names_all[i] for i in so]
        has_steps = True
    else:
        has_steps = False

    # Module paths from nn.Module python frames.
    o_module = pa.nulls(n_op, pa.string())
    with_modules = acc.count(C.PYMODULE) > 0
    if with_modules:
        m_ts = acc.column(C.PYMODULE, "ts") - t0
        m_dur = acc.column(C.PYMODULE, "dur")
        m_thr = thr["PYMODULE"]
        m_names = [n[len("nn.Module: ") :] for n in acc.column(C.PYMODULE, "name").to_pylist()]
        m_order, m_parent, m_depth = nest(m_thr, m_ts, m_dur)
        paths: list[str] = [""] * len(m_names)
        for j in np.argsort(m_depth, kind="stable"):
            p = m_parent[j]
            paths[j] = f"{paths[p]}.{m_names[j]}" if p >= 0 else m_names[j]
        enc = enclosing(m_order, m_thr, m_ts, m_ts + m_dur, m_parent, o_thr, o_ts)
        o_module = pa.array(paths, type=pa.string()).take(pa.array(enc, mask=enc < 0))
        o_module = o_module.dictionary_encode()

    # Backward flag: autograd engine frames, fwdbwd flow ends, and their descendants.
    bwd = _str_test(o_name, lambda a: pc.starts_with(a, _BWD)) if n_op else np.zeros(0, dtype=bool)
    if acc.count(C.FLOW_END) and n_op:
        f_ts = acc.column(C.FLOW_END, "ts") - t0
        f_thr = thr["FLOW_END"]
        hit = enclosing(order, o_thr, o_ts, o_end, parent, f_thr, f_ts)
        bwd[hit[hit >= 0]] = True
    if n_op:
        for d in range(1, int(depth.max()) + 1):
            sel = np.flatnonzero((depth == d) & (parent >= 0))
            bwd[sel] |= bwd[parent[sel]]
    o_step = _steps_of(o_ts, s_start, s_end, s_num) if has_steps else np.zeros(n_op, dtype=np.int32)

    ops_cols = {
        "op_id": np.arange(n_op, dtype=np.int64),
        "category": _labels(o_cat, {C.ANNOT: "user_annotation"}, "cpu_op"),
        "name": o_name,
        "pid": o_pid,
        "tid": o_tid,
        "ts": o_ts,
        "dur": o_dur,
        "parent": parent,
        "depth": depth.astype(np.int32),
        "step": o_step,
        "is_backward": bwd,
        "module": o_module,
    }
    for col in ("external_id", "sequence_number", "fwd_thread_id"):
        ops_cols[col] = _arr(acc, C.OP, col, n_op)[perm] if n_op else np.zeros(0, np.int64)
    for col in ("input_dims", "input_types", "input_strides", "concrete_inputs"):
        c = acc.pop(C.OP, col)
        ops_cols[col] = _take(c, perm) if c is not None else pa.nulls(n_op, pa.string())
    c = acc.pop(C.OP, "flops")
    ops_cols["flops"] = _take(c, perm) if c is not None else pa.nulls(n_op, pa.float64())
    ops = _table("ops", ops_cols, lazy)
    ready("ops", ops)
    # The ops' string columns before the final cast: dictionary takes move only indices.
    o_src = {k: _dense(ops_cols[k]) for k in ("name", "input_dims", "input_types", "module")}
    ext_ops = np.asarray(ops.column("external_id").to_numpy(), dtype=np.int64)
    dims_null, flops_null = ops.column("input_dims").null_count, ops.column("flops").null_count
    del ops, ops_cols, o_pid, o_tid, perm, keys, key_parts, all_pid, all_tid
    acc.drop(C.OP, C.PYMODULE, C.FLOW_END)

    # ---- runtime ----
    if n_rt:
        r_ts = acc.column(C.RUNTIME, "ts") - t0
        r_perm = np.argsort(r_ts, kind="stable")
        r_ts = r_ts[r_perm]
        r_dur = acc.column(C.RUNTIME, "dur")[r_perm]
        r_thr = thr["RUNTIME"][r_perm]
        r_corr = acc.column(C.RUNTIME, "correlation")[r_perm]
        r_cat = acc.column(C.RUNTIME, "category")[r_perm]
        r_op = enclosing(order, o_thr, o_ts, o_end, parent, r_thr, r_ts)
        runtime = _table(
            "runtime",
            {
                "runtime_id": np.arange(n_rt, dtype=np.int64),
                "category": _labels(r_cat, {C.DRIVER: "cuda_driver"}, "cuda_runtime"),
                "name": _take(acc.column(C.RUNTIME, "name"), r_perm),
                "pid": acc.column(C.RUNTIME, "pid")[r_perm],
                "tid": acc.column(C.RUNTIME, "tid")[r_perm],
                "ts": r_ts,
                "dur": r_dur,
                "correlation": r_corr,
                "external_id": acc.column(C.RUNTIME, "external_id")[r_perm],
                "cbid": acc.column(C.RUNTIME, "cbid")[r_perm],
                "op_id": r_op,
                "step": (
                    _steps_of(r_ts, s_start, s_end, s_num)
                    if has_steps
                    else np.zeros(n_rt, dtype=np.int32)
                ),
            },
        )
    else:
        r_corr = r_op = np.zeros(0, dtype=np.int64)
        r_cat = np.zeros(0, dtype=np.int8)
        runtime = ARROW["runtime"].empty_table()
    ready("runtime", runtime)
    r_step = np.asarray(runtime.column("step").to_numpy(), dtype=np.int32)
    r_end_max = (
        int((runtime.column("ts").to_numpy() + runtime.column("dur").to_numpy()).max())
        if n_rt
        else None
    )
    del runtime
    acc.drop(C.RUNTIME)

    # ---- kernels ----
    gpu_kinds = [k for k, n in gpu_counts.items() if n]

    def kcol(name: str) -> Any:
        parts = [acc.column(k, name) for k in gpu_kinds]
        if isinstance(parts[0], np.ndarray):
            return np.concatenate(parts)
        return pa.chunked_array([c for p in parts for c in p.chunks], type=parts[0].type)

    if n_k:
        k_ts = kcol("ts") - t0
        k_dev = kcol("device")
        k_stream = kcol("stream")
        k_perm = np.lexsort((k_stream, k_dev, k_ts))
        k_ts = k_ts[k_perm]
        k_corr = kcol("correlation")[k_perm]
        k_ext = kcol("external_id")[k_perm]
        # Launch: runtime call with the same correlation (runtime API preferred over driver).
        rt_id = np.full(n_k, -1, dtype=np.int64)
        if n_rt:
            ro = np.lexsort((r_cat, r_corr))
            sc = r_corr[ro]
            pos = np.searchsorted(sc, k_corr, side="left")
            ok = (k_corr >= 0) & (pos < len(sc))
            ok &= sc[np.minimum(pos, len(sc) - 1)] == k_corr
            rt_id = np.where(ok, ro[np.minimum(pos, len(sc) - 1)], -1)
        k_op = np.where(rt_id >= 0, r_op[np.maximum(rt_id, 0)], -1)
        # Fallback for kernels without a launch event: the operator's External id.
        need = (k_op < 0) & (k_ext >= 0)
        if need.any() and n_op:
            eo = np.argsort(ext_ops, kind="stable")
            se = ext_ops[eo]
            pos = np.searchsorted(se, k_ext[need])
            hit = (pos < len(se)) & (se[np.minimum(pos, len(se) - 1)] == k_ext[need])
            k_op[need] = np.where(hit, eo[np.minimum(pos, len(se) - 1)], -1)
        is_op = np.asarray(o_cat == C.OP) if n_op else np.zeros(0, dtype=bool)
        top = climb_top(parent, is_op) if n_op else np.zeros(0, dtype=np.int64)
        k_top = np.where(k_op >= 0, top[np.maximum(k_op, 0)], -1) if n_op else k_op
        if n_op:
            k_top = np.where((k_top >= 0) & is_op[np.maximum(k_top, 0)], k_top, -1)
        if has_steps:
            k_step = np.where(
                rt_id >= 0,
                r_step[np.maximum(rt_id, 0)],
                np.where(k_op >= 0, o_step[np.maximum(k_op, 0)], -1),
            )
        else:
            k_step = np.zeros(n_k, dtype=np.int64)
        kind_codes = kcol("kind")[k_perm]
        kernels = _table(
            "kernels",
            {
                "kernel_id": np.arange(n_k, dtype=np.int64),
                "kind": _labels(kind_codes, {C.KERNEL: "kernel", C.MEMCPY: "memcpy"}, "memset"),
                "name": _take(kcol("name"), k_perm),
                "device": k_dev[k_perm].astype(np.int32),
                "stream": k_stream[k_perm],
                "ts": k_ts,
                "dur": kcol("dur")[k_perm],
                "correlation": k_corr,
                "external_id": k_ext,
                **{
                    c: _take(kcol(c), k_perm)
                    for c in (
                        "grid_x",
                        "grid_y",
                        "grid_z",
                        "block_x",
                        "block_y",
                        "block_z",
                        "registers_per_thread",
                        "shared_memory",
                        "bytes",
                    )
                },
                "step": k_step.astype(np.int32),
                "runtime_id": rt_id,
                "op_id": k_op,
                "op_name": _take_nullable(o_src["name"], k_op),
                "op_input_dims": _take_nullable(o_src["input_dims"], k_op),
                "op_input_types": _take_nullable(o_src["input_types"], k_op),
                "top_op_id": k_top,
                "top_op_name": _take_nullable(o_src["name"], k_top),
                "module": _take_nullable(o_src["module"], k_op),
            },
            lazy,
        )
    else:
        kernels = ARROW["kernels"].empty_table()
        rt_id = k_op = np.zeros(0, dtype=np.int64)
    ready("kernels", kernels)
    acc.drop(*gpu_kinds)
    k_ts_all = np.asarray(kernels.column("ts").to_numpy(), dtype=np.int64)
    k_end_all = k_ts_all + np.asarray(kernels.column("dur").to_numpy(), dtype=np.int64)
    k_step_all = np.asarray(kernels.column("step").to_numpy(), dtype=np.int64)
    k_devices = sorted({int(d) for d in np.unique(kernels.column("device").to_numpy())})
    del kernels

    # ---- memory ----
    n_m = acc.count(C.MEMORY)
    if n_m:
        m_ts = acc.column(C.MEMORY, "ts") - t0
        mp = np.argsort(m_ts, kind="stable")
        m_ts = m_ts[mp]
        m_thr = thr["MEMORY"][mp]
        m_op = enclosing(order, o_thr, o_ts, o_end, parent, m_thr, m_ts)
        dtype_ = acc.column(C.MEMORY, "device_type")[mp]
        dev = acc.column(C.MEMORY, "device")[mp]
        memory = _table(
            "memory",
            {
                "ts": m_ts,
                "device_type": dtype_.astype(np.int32),
                "device": np.where(dtype_ == 0, -1, dev).astype(np.int32),
                "addr": acc.column(C.MEMORY, "addr")[mp],
                "bytes": acc.column(C.MEMORY, "bytes")[mp],
                "total_allocated": _take(acc.column(C.MEMORY, "total_allocated"), mp),
                "total_reserved": _take(acc.column(C.MEMORY, "total_reserved"), mp),
                "op_id": m_op,
                "op_name": _take_nullable(o_src["name"], m_op),
                "step": (
                    _steps_of(m_ts, s_start, s_end, s_num)
                    if has_steps
                    else np.zeros(n_m, dtype=np.int32)
                ),
            },
            lazy,
        )
    else:
        memory = ARROW["memory"].empty_table()
    ready("memory", memory)
    del memory
    acc.drop(C.MEMORY)

    # ---- steps ----
    if has_steps:
        nums, names, c_ts, c_dur = s_num, s_names, s_start, s_end - s_start
    else:
        ends = [o_end.max() if n_op else 0, k_end_all.max() if n_k else 0]
        if r_end_max is not None:
            ends.append(r_end_max)
        nums = np.zeros(1, dtype=np.int64)
        names, c_ts, c_dur = (
            ["(whole trace)"],
            np.zeros(1, dtype=np.int64),
            np.asarray([max(int(e) for e in ends)], dtype=np.int64),
        )
    g_ts: list[int | None] = []
    g_dur: list[int | None] = []
    g_busy: list[int] = []
    g_cnt: list[int] = []
    for s in nums:
        sel = k_step_all == s
        cnt = int(sel.sum())
        g_cnt.append(cnt)
        if cnt:
            a, b = int(k_ts_all[sel].min()), int(k_end_all[sel].max())
            g_ts.append(a)
            g_dur.append(b - a)
            g_busy.append(union_length(k_ts_all[sel], k_end_all[sel]))
        else:
            g_ts.append(None)
            g_dur.append(None)
            g_busy.append(0)
    steps = _table(
        "steps",
        {
            "step": nums.astype(np.int32),
            "name": pa.array(names, type=pa.string()),
            "cpu_ts": np.asarray(c_ts, dtype=np.int64),
            "cpu_dur": np.asarray(c_dur, dtype=np.int64),
            "gpu_ts": pa.array(g_ts, type=pa.int64()),
            "gpu_dur": pa.array(g_dur, type=pa.int64()),
            "gpu_busy": np.asarray(g_busy, dtype=np.int64),
            "kernel_count": np.asarray(g_cnt, dtype=np.int64),
        },
    )
    ready("steps", steps)

    # ---- meta ----
    with_launch = int((rt_id >= 0).sum())
    linked = int(((rt_id >= 0) & (k_op >= 0)).sum())
    devprops = header.get("deviceProperties")
    seen = {  # the profiler options, as the events show them
        "record_shapes": bool(n_op and dims_null < n_op),
        "profile_memory": n_m > 0,
        "with_stack": acc.python_events > 0,
        "with_modules": with_modules,
        "with_flops": bool(n_op and flops_null < n_op),
    }
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "time_unit": "ns",
        "trace_start_us": t0 / 1000.0,
        "trace_start_ns": t0,
        "device_properties": devprops if isinstance(devprops, list) else [],
        "devices": k_devices if n_k else [],
        "options": _options(header, seen),
        "options_in_data": seen,
        "versions": {
            k: header[k]
            for k in (
                "schemaVersion",
                "cupti_version",
                "cuda_runtime_version",
                "cuda_driver_version",
                "roctracer_version",
                "hip_runtime_version",
            )
            if k in header
        },
        "distributed_info": header.get("distributedInfo"),
        "trace_name": header.get("traceName"),
        "display_time_unit": header.get("displayTimeUnit"),
        "base_time_ns": header.get("baseTimeNanoseconds"),
        "has_steps": has_steps,
        "counts": {
            "kernels": int(gpu_counts[C.KERNEL]),
            "memcpy": int(gpu_counts[C.MEMCPY]),
            "memset": int(gpu_counts[C.MEMSET]),
            "ops": n_op,
            "runtime": n_rt,
            "memory": n_m,
            "steps": len(nums),
            "gpu_activities_with_launch": with_launch,
            "gpu_activities_linked_to_op": linked,
        },
        "raw_event_counts": dict(acc.raw_counts),
        "dropped_events": dict(acc.dropped),
        "link_rate": (linked / with_launch) if with_launch else None,
    }
    return Tables(meta=meta, **held)

"""The ``ops`` table: CPU operators and user annotations with their time nesting, step,
backward flag and nn.Module path; and what the later tables link to (:class:`Ops`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.parse.arrays import dense, labels, pop_column, str_test, take, to_table
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import ANNOT, FLOW_END, OP, PYMODULE
from tracekit.parse.intervals import enclosing, nest
from tracekit.parse.link import OpIndex, StepSpans, Threads, find_steps, step_of, thread_keys

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
_BWD = "autograd::engine::evaluate_function"
_MODULE = "nn.Module: "


@dataclass
class Ops:
    """The built ops, as the runtime, kernels, memory and steps tables need them."""

    n: int
    index: OpIndex  # for "the innermost op enclosing (thread, t)"
    category: npt.NDArray[np.int8]  # OP or ANNOT per op
    step: npt.NDArray[np.int32]
    external_id: I64
    src: dict[str, Any]  # name, input_dims, input_types, module: before the final cast
    threads: Threads  # thread keys of runtime calls, memory events ... (file order)
    steps: StepSpans | None
    end_max: int  # latest op end (0 without ops)
    with_modules: bool  # the trace has nn.Module frames
    shapes_recorded: bool  # some op has input shapes (record_shapes)
    flops_recorded: bool  # some op has a FLOP count (with_flops)


def build_ops(acc: Accumulator, t0: int, lazy: bool) -> tuple[pa.Table, Ops]:
    """The ops table, ``op_id`` in start order (longest first: a parent precedes its
    children). Frees the accumulated ops, Python frames and flow ends."""
    n = acc.count(OP)
    ts = pop_column(acc, OP, "ts", 0) - t0
    dur = pop_column(acc, OP, "dur", 0)
    pid = pop_column(acc, OP, "pid", 0)
    tid = pop_column(acc, OP, "tid", 0)
    cat = pop_column(acc, OP, "category", 0, np.int8)
    name = dense(acc.pop(OP, "name")) if n else pa.array([], pa.string())
    perm = np.lexsort((-dur, ts)) if n else np.zeros(0, dtype=np.int64)
    ts, dur, pid, tid, cat = (a[perm] for a in (ts, dur, pid, tid, cat))
    name = take(name, perm)
    threads = thread_keys(acc, pid, tid)
    order, parent, depth = nest(threads.ops, ts, dur)
    index = OpIndex(order, threads.ops, ts, ts + dur, parent)
    steps = find_steps(name, cat, ts, index.end)
    with_modules = acc.count(PYMODULE) > 0
    module = module_paths(acc, t0, threads, ts) if with_modules else pa.nulls(n, pa.string())
    cols: dict[str, Any] = {
        "op_id": np.arange(n, dtype=np.int64),
        "category": labels(cat, {ANNOT: "user_annotation"}, "cpu_op"),
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "parent": parent,
        "depth": depth.astype(np.int32),
        "step": step_of(steps, ts),
        "is_backward": backward_flags(acc, t0, threads, name, index, depth),
        "module": module,
    }
    for col in ("external_id", "sequence_number", "fwd_thread_id"):
        cols[col] = pop_column(acc, OP, col, n)[perm] if n else np.zeros(0, np.int64)
    for col in ("input_dims", "input_types", "input_strides", "concrete_inputs"):
        c = acc.pop(OP, col)
        cols[col] = take(c, perm) if c is not None else pa.nulls(n, pa.string())
    c = acc.pop(OP, "flops")
    cols["flops"] = take(c, perm) if c is not None else pa.nulls(n, pa.float64())
    table = to_table("ops", cols, lazy)
    acc.drop(OP, PYMODULE, FLOW_END)
    ops = Ops(
        n=n,
        index=index,
        category=cat,
        step=cols["step"],
        external_id=np.asarray(table.column("external_id").to_numpy(), dtype=np.int64),
        # The string columns before the final cast: dictionary takes move only indices.
        src={k: dense(cols[k]) for k in ("name", "input_dims", "input_types", "module")},
        threads=threads,
        steps=steps,
        end_max=int(index.end.max()) if n else 0,
        with_modules=with_modules,
        shapes_recorded=bool(n and table.column("input_dims").null_count < n),
        flops_recorded=bool(n and table.column("flops").null_count < n),
    )
    return table, ops


def module_paths(acc: Accumulator, t0: int, threads: Threads, op_ts: I64) -> pa.Array:
    """Each op's nn.Module path (``GPT_0.Block_3.MLP_0``), from the innermost nn.Module
    Python frame enclosing it (null: none)."""
    m_ts = acc.column(PYMODULE, "ts") - t0
    m_dur = acc.column(PYMODULE, "dur")
    m_thr = threads.other[PYMODULE]
    m_names = [n[len(_MODULE) :] for n in acc.column(PYMODULE, "name").to_pylist()]
    m_order, m_parent, m_depth = nest(m_thr, m_ts, m_dur)
    paths: list[str] = [""] * len(m_names)
    for j in np.argsort(m_depth, kind="stable"):
        p = m_parent[j]
        paths[j] = f"{paths[p]}.{m_names[j]}" if p >= 0 else m_names[j]
    enc = enclosing(m_order, m_thr, m_ts, m_ts + m_dur, m_parent, threads.ops, op_ts)
    module = pa.array(paths, type=pa.string()).take(pa.array(enc, mask=enc < 0))
    return module.dictionary_encode()


def backward_flags(
    acc: Accumulator, t0: int, threads: Threads, name: pa.Array, index: OpIndex, depth: I64
) -> B:
    """Backward ops: autograd engine frames, ops enclosing a fwdbwd flow end, and all
    their descendants."""
    if not len(name):
        return np.zeros(0, dtype=bool)
    bwd = str_test(name, lambda a: pc.starts_with(a, _BWD))
    if acc.count(FLOW_END):
        f_ts = acc.column(FLOW_END, "ts") - t0
        hit = index.enclosing(threads.other[FLOW_END], f_ts)
        bwd[hit[hit >= 0]] = True
    parent = index.parent
    for d in range(1, int(depth.max()) + 1):
        sel = np.flatnonzero((depth == d) & (parent >= 0))
        bwd[sel] |= bwd[parent[sel]]
    return bwd

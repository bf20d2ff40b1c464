"""The ``kernels`` table: GPU kernels, memcpy and memset, each linked to its launching
runtime call (correlation id), the op around that launch, the outermost op and the step;
and what the steps table and meta need (:class:`Kernels`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tracekit.parse.arrays import labels, take, take_nullable, to_table
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import KERNEL, MEMCPY, MEMSET, OP
from tracekit.parse.link import launch_rows, link_by_external_id, pick, top_ops
from tracekit.parse.ops import Ops
from tracekit.parse.runtime import Runtime
from tracekit.schema import ARROW

I64 = npt.NDArray[np.int64]
GPU_KINDS = (KERNEL, MEMCPY, MEMSET)
_PLAIN = (  # columns taken as they are, in kernel order
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


@dataclass
class Kernels:
    """The built GPU activities, as the steps table and meta need them."""

    ts: I64
    end: I64
    step: I64
    devices: list[int]
    with_launch: int  # activities with a launch call
    linked: int  # ... and an op around that call


@dataclass
class _Links:
    runtime_id: I64
    op_id: I64
    top_op_id: I64
    step: I64


def _column(acc: Accumulator, kinds: list[int], name: str) -> Any:
    """One column over the kinds' accumulated rows (kernels, then memcpy, then memset)."""
    parts = [acc.column(k, name) for k in kinds]
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return pa.chunked_array([c for p in parts for c in p.chunks], type=parts[0].type)


def link_kernels(corr: I64, ext: I64, ops: Ops, rt: Runtime) -> _Links:
    """Launch call (same correlation), its op (else the op with the same External id),
    the outermost op, and the step of the launch (else of the op)."""
    # no launch call at all (a kernels-only trace, collectors/cupti_pass.py; an empty
    # runtime table): no launch row and no op either
    rt_id = launch_rows(corr, rt.correlation, rt.category)
    k_op = pick(rt.op, rt_id, -1)
    link_by_external_id(k_op, ext, ops.external_id)
    k_top = top_ops(k_op, ops.index.parent, np.asarray(ops.category == OP))
    if ops.steps is not None:
        step = np.where(rt_id >= 0, pick(rt.step, rt_id, -1), pick(ops.step, k_op, -1))
    else:
        step = np.zeros(len(corr), dtype=np.int64)
    return _Links(rt_id, k_op, k_top, step)


def build_kernels(
    acc: Accumulator, t0: int, ops: Ops, rt: Runtime, lazy: bool
) -> tuple[pa.Table, Kernels]:
    """The kernels table, ``kernel_id`` in (start, device, stream) order. Frees the
    accumulated GPU activities."""
    counts = {k: acc.count(k) for k in GPU_KINDS}
    kinds = [k for k, n in counts.items() if n]
    n = sum(counts.values())
    if n:
        ts = _column(acc, kinds, "ts") - t0
        dev = _column(acc, kinds, "device")
        stream = _column(acc, kinds, "stream")
        perm = np.lexsort((stream, dev, ts))
        ts = ts[perm]
        corr = _column(acc, kinds, "correlation")[perm]
        ext = _column(acc, kinds, "external_id")[perm]
        ln = link_kernels(corr, ext, ops, rt)
        kind = _column(acc, kinds, "kind")[perm]
        src = ops.src
        cols = {
            "kernel_id": np.arange(n, dtype=np.int64),
            "kind": labels(kind, {KERNEL: "kernel", MEMCPY: "memcpy"}, "memset"),
            "name": take(_column(acc, kinds, "name"), perm),
            "device": dev[perm].astype(np.int32),
            "stream": stream[perm],
            "ts": ts,
            "dur": _column(acc, kinds, "dur")[perm],
            "correlation": corr,
            "external_id": ext,
            **{c: take(_column(acc, kinds, c), perm) for c in _PLAIN},
            "step": ln.step.astype(np.int32),
            "runtime_id": ln.runtime_id,
            "op_id": ln.op_id,
            "op_name": take_nullable(src["name"], ln.op_id),
            "op_input_dims": take_nullable(src["input_dims"], ln.op_id),
            "op_input_types": take_nullable(src["input_types"], ln.op_id),
            "top_op_id": ln.top_op_id,
            "top_op_name": take_nullable(src["name"], ln.top_op_id),
            "module": take_nullable(src["module"], ln.op_id),
        }
        table = to_table("kernels", cols, lazy)
        rt_id, k_op = ln.runtime_id, ln.op_id
    else:
        table = ARROW["kernels"].empty_table()
        rt_id = k_op = np.zeros(0, dtype=np.int64)
    acc.drop(*kinds)
    k_ts = np.asarray(table.column("ts").to_numpy(), dtype=np.int64)
    return table, Kernels(
        ts=k_ts,
        end=k_ts + np.asarray(table.column("dur").to_numpy(), dtype=np.int64),
        step=np.asarray(table.column("step").to_numpy(), dtype=np.int64),
        devices=sorted({int(d) for d in np.unique(table.column("device").to_numpy())}),
        with_launch=int((rt_id >= 0).sum()),
        linked=int(((rt_id >= 0) & (k_op >= 0)).sum()),
    )

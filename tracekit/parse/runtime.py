"""The ``runtime`` table: CUDA/HIP runtime and driver API calls, each linked to the
innermost op around it and its step; and what the kernels table links to (:class:`Runtime`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tracekit.parse.arrays import labels, take, to_table
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import DRIVER, RUNTIME
from tracekit.parse.link import step_of
from tracekit.parse.ops import Ops
from tracekit.schema import ARROW

I64 = npt.NDArray[np.int64]


@dataclass
class Runtime:
    """Per runtime row, what a GPU activity's launch link needs."""

    correlation: I64
    category: npt.NDArray[np.int8]  # RUNTIME or DRIVER
    op: I64  # innermost enclosing op (-1: none)
    step: npt.NDArray[np.int32]
    end_max: int | None  # latest call end (None: no calls)


def build_runtime(acc: Accumulator, t0: int, ops: Ops) -> tuple[pa.Table, Runtime]:
    """The runtime table, ``runtime_id`` in start order. Frees the accumulated calls."""
    n = acc.count(RUNTIME)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        none = Runtime(empty, np.zeros(0, dtype=np.int8), empty, np.zeros(0, np.int32), None)
        return ARROW["runtime"].empty_table(), none
    ts = acc.column(RUNTIME, "ts") - t0
    perm = np.argsort(ts, kind="stable")
    ts = ts[perm]
    dur = acc.column(RUNTIME, "dur")[perm]
    thread = ops.threads.other[RUNTIME][perm]
    corr = acc.column(RUNTIME, "correlation")[perm]
    cat = acc.column(RUNTIME, "category")[perm]
    op = ops.index.enclosing(thread, ts)
    step = step_of(ops.steps, ts)
    table = to_table(
        "runtime",
        {
            "runtime_id": np.arange(n, dtype=np.int64),
            "category": labels(cat, {DRIVER: "cuda_driver"}, "cuda_runtime"),
            "name": take(acc.column(RUNTIME, "name"), perm),
            "pid": acc.column(RUNTIME, "pid")[perm],
            "tid": acc.column(RUNTIME, "tid")[perm],
            "ts": ts,
            "dur": dur,
            "correlation": corr,
            "external_id": acc.column(RUNTIME, "external_id")[perm],
            "cbid": acc.column(RUNTIME, "cbid")[perm],
            "op_id": op,
            "step": step,
        },
    )
    acc.drop(RUNTIME)
    return table, Runtime(corr, cat, op, step, int((ts + dur).max()))

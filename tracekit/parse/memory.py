"""The ``memory`` table: allocator events (``[memory]`` instants of profile_memory), each
linked to the innermost op around it and its step."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracekit.parse.arrays import take, take_nullable, to_table
from tracekit.parse.columns import Accumulator
from tracekit.parse.events import MEMORY
from tracekit.parse.link import step_of
from tracekit.parse.ops import Ops
from tracekit.schema import ARROW


def build_memory(acc: Accumulator, t0: int, ops: Ops, lazy: bool) -> pa.Table:
    """The memory table in time order. Frees the accumulated memory events."""
    n = acc.count(MEMORY)
    if not n:
        return ARROW["memory"].empty_table()
    ts = acc.column(MEMORY, "ts") - t0
    perm = np.argsort(ts, kind="stable")
    ts = ts[perm]
    op = ops.index.enclosing(ops.threads.other[MEMORY][perm], ts)
    device_type = acc.column(MEMORY, "device_type")[perm]
    device = acc.column(MEMORY, "device")[perm]
    table = to_table(
        "memory",
        {
            "ts": ts,
            "device_type": device_type.astype(np.int32),
            "device": np.where(device_type == 0, -1, device).astype(np.int32),  # 0: CPU
            "addr": acc.column(MEMORY, "addr")[perm],
            "bytes": acc.column(MEMORY, "bytes")[perm],
            "total_allocated": take(acc.column(MEMORY, "total_allocated"), perm),
            "total_reserved": take(acc.column(MEMORY, "total_reserved"), perm),
            "op_id": op,
            "op_name": take_nullable(ops.src["name"], op),
            "step": step_of(ops.steps, ts),
        },
        lazy,
    )
    acc.drop(MEMORY)
    return table

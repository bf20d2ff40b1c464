"""The ``steps`` table: one row per ``ProfilerStep#N`` (or one "(whole trace)" row), with
the CPU span and the GPU span, busy time and kernel count of the work it launched."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracekit.parse.arrays import to_table
from tracekit.parse.intervals import union_length
from tracekit.parse.kernels import Kernels
from tracekit.parse.link import StepSpans


def build_steps(steps: StepSpans | None, gpu: Kernels, trace_end: int) -> pa.Table:
    """The steps table; without step markers one step 0 from 0 to ``trace_end``."""
    if steps is not None:
        nums, names, c_ts, c_dur = steps.num, steps.names, steps.start, steps.end - steps.start
    else:
        nums = np.zeros(1, dtype=np.int64)
        names = ["(whole trace)"]
        c_ts, c_dur = np.zeros(1, dtype=np.int64), np.asarray([trace_end], dtype=np.int64)
    g_ts: list[int | None] = []
    g_dur: list[int | None] = []
    g_busy: list[int] = []
    g_cnt: list[int] = []
    for s in nums:
        sel = gpu.step == s
        cnt = int(sel.sum())
        g_cnt.append(cnt)
        if cnt:
            a, b = int(gpu.ts[sel].min()), int(gpu.end[sel].max())
            g_ts.append(a)
            g_dur.append(b - a)
            g_busy.append(union_length(gpu.ts[sel], gpu.end[sel]))
        else:
            g_ts.append(None)
            g_dur.append(None)
            g_busy.append(0)
    return to_table(
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

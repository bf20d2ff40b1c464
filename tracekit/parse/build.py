"""Assemble the accumulated columns into the schema's tables, one builder per table:
``ops`` (with nesting), ``runtime``, ``kernels``, ``memory``, ``steps``, in that order
(each links to the ones before it; see ``tracekit.parse.link``), ``comms`` (the collective
metadata, ``tracekit.parse.comms``), then ``meta``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tracekit.errors import TraceError
from tracekit.parse.columns import Accumulator
from tracekit.parse.comms import build_comms
from tracekit.parse.events import (
    GPU_ANNOT,
    KERNEL,
    MEMCPY,
    MEMORY,
    MEMSET,
    OP,
    PYMODULE,
    RUNTIME,
)
from tracekit.parse.kernels import Kernels, build_kernels
from tracekit.parse.memory import build_memory
from tracekit.parse.ops import Ops, build_ops
from tracekit.parse.runtime import build_runtime
from tracekit.parse.steps import build_steps
from tracekit.schema import ARROW, SCHEMA_VERSION


@dataclass
class Tables:
    kernels: pa.Table
    ops: pa.Table
    memory: pa.Table
    steps: pa.Table
    runtime: pa.Table
    meta: dict[str, Any] = field(default_factory=dict)
    comms: pa.Table = field(default_factory=ARROW["comms"].empty_table)

    def items(self) -> list[tuple[str, pa.Table]]:
        return [
            ("kernels", self.kernels),
            ("ops", self.ops),
            ("memory", self.memory),
            ("steps", self.steps),
            ("runtime", self.runtime),
            ("comms", self.comms),
        ]


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
    ``lazy``: string columns may stay dictionary-encoded (see
    :func:`tracekit.parse.arrays.to_table`). ``release``: the result holds empty tables
    and only ``on_table`` gets the data (a writer frees each table once written)."""
    held: dict[str, pa.Table] = {}

    def ready(name: str, table: pa.Table) -> None:
        if on_table is not None:
            on_table(name, table)
        held[name] = ARROW[name].empty_table() if release else table

    if not any(acc.count(k) for k in (OP, KERNEL, MEMCPY, MEMSET, RUNTIME)):
        raise TraceError(
            f"{source}: not a PyTorch profiler trace: no cpu_op, kernel or runtime events"
        )
    t0 = trace_start(acc)
    # Each table goes to on_table and is dropped here at once: the writer frees it once
    # written, while the next one is built.
    table, ops = build_ops(acc, t0, lazy)
    ready("ops", table)
    del table
    table, rt = build_runtime(acc, t0, ops)
    ready("runtime", table)
    del table
    table, gpu = build_kernels(acc, t0, ops, rt, lazy)
    ready("kernels", table)
    del table
    ready("memory", build_memory(acc, t0, ops, lazy))
    ends = [ops.end_max, int(gpu.end.max()) if len(gpu.end) else 0]
    if rt.end_max is not None:
        ends.append(rt.end_max)
    table = build_steps(ops.steps, gpu, max(ends))
    n_steps = table.num_rows
    ready("steps", table)
    ready("comms", build_comms(acc.comms, t0))
    acc.comms.clear()
    return Tables(meta=_meta(acc, header, t0, n_steps, ops, gpu), **held)


def trace_start(acc: Accumulator) -> int:
    """The earliest timestamp of any timed event (ns): time 0 of every table."""
    starts = [
        acc.column(k, "ts")
        for k in (OP, KERNEL, MEMCPY, MEMSET, RUNTIME, MEMORY, PYMODULE, GPU_ANNOT)
    ]
    return int(min(int(s.min()) for s in starts if s is not None and len(s)))


def _options(header: dict[str, Any], seen: dict[str, bool]) -> dict[str, bool]:
    """Profiler options: as declared in the trace header (PyTorch >= 2.4 writes
    record_shapes/profile_memory/with_flops there), else as seen in the events."""
    return {
        k: bool(header[k]) if isinstance(header.get(k), (int, bool)) else v for k, v in seen.items()
    }


def _meta(
    acc: Accumulator,
    header: dict[str, Any],
    t0: int,
    n_steps: int,
    ops: Ops,
    gpu: Kernels,
) -> dict[str, Any]:
    """meta.json (less ``source``): options, versions, counts, link rate."""
    devprops = header.get("deviceProperties")
    counts = {
        "kernels": acc.count(KERNEL),
        "memcpy": acc.count(MEMCPY),
        "memset": acc.count(MEMSET),
        "ops": acc.count(OP),
        "runtime": acc.count(RUNTIME),
        "memory": acc.count(MEMORY),
        "steps": n_steps,
        "gpu_activities_with_launch": gpu.with_launch,
        "gpu_activities_linked_to_op": gpu.linked,
    }
    seen = {  # the profiler options, as the events show them
        "record_shapes": ops.shapes_recorded,
        "profile_memory": counts["memory"] > 0,
        "with_stack": acc.python_events > 0,
        "with_modules": ops.with_modules,
        "with_flops": ops.flops_recorded,
    }
    versions = (
        "schemaVersion",
        "cupti_version",
        "cuda_runtime_version",
        "cuda_driver_version",
        "roctracer_version",
        "hip_runtime_version",
    )
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "time_unit": "ns",
        "trace_start_us": t0 / 1000.0,
        "trace_start_ns": t0,
        "device_properties": devprops if isinstance(devprops, list) else [],
        "devices": gpu.devices,
        "options": _options(header, seen),
        "options_in_data": seen,
        "versions": {k: header[k] for k in versions if k in header},
        "distributed_info": header.get("distributedInfo"),
        "trace_name": header.get("traceName"),
        "display_time_unit": header.get("displayTimeUnit"),
        "base_time_ns": header.get("baseTimeNanoseconds"),
        "has_steps": ops.steps is not None,
        "counts": counts,
        "raw_event_counts": dict(acc.raw_counts),
        "dropped_events": dict(acc.dropped),
        "link_rate": (gpu.linked / gpu.with_launch) if gpu.with_launch else None,
    }
    if acc.bad:  # only in damaged traces: values present but unreadable, read as missing
        meta["bad_values"] = dict(sorted(acc.bad.items()))
    return meta

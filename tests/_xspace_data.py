"""A small trace in tracekit's table schema (schema.py), for the XSpace exporter tests.

Two profiler steps on a main thread, backward work on an autograd thread, two
GPUs (device 0 with a compute and a copy stream, device 1 with one kernel),
kernels, a memcpy, a memset and CUDA/CPU allocator events. Times are ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.schema import TABLES

MAIN, AUTOGRAD, PID = 100, 200, 100


def _frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a frame with exactly the schema's columns (ids -1, the rest null)."""
    cols = [c.name for c in TABLES[table]]
    out = []
    for i, row in enumerate(rows):
        full: dict[str, Any] = {}
        for c in TABLES[table]:
            if c.name in row:
                full[c.name] = row[c.name]
            elif c.name.endswith("_id") or c.name in ("parent", "step", "correlation", "cbid"):
                full[c.name] = -1
            else:
                full[c.name] = None
        first = cols[0]
        if first.endswith("_id") and first not in row:
            full[first] = i
        out.append(full)
    return pd.DataFrame(out, columns=cols)


@dataclass
class FakeTrace:
    kernels: pd.DataFrame
    ops: pd.DataFrame
    memory: pd.DataFrame
    steps: pd.DataFrame
    runtime: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    manifest: dict[str, Any] | None = None


def _op(
    op_id: int,
    name: str,
    tid: int,
    ts: int,
    dur: int,
    parent: int,
    depth: int,
    step: int,
    category: str = "cpu_op",
    **kw: Any,
) -> dict[str, Any]:
    return dict(
        op_id=op_id,
        category=category,
        name=name,
        pid=PID,
        tid=tid,
        ts=ts,
        dur=dur,
        parent=parent,
        depth=depth,
        step=step,
        **kw,
    )


def _rt(name: str, tid: int, ts: int, dur: int, corr: int, op_id: int, step: int) -> dict[str, Any]:
    return dict(
        category="cuda_runtime",
        name=name,
        pid=PID,
        tid=tid,
        ts=ts,
        dur=dur,
        correlation=corr,
        external_id=corr + 1000,
        cbid=211,
        op_id=op_id,
        step=step,
    )


GEMM = "ampere_sgemm_128x64_nn"
BWD_GEMM = "ampere_sgemm_64x64_tn"
HTOD = "Memcpy HtoD (Pageable -> Device)"


def make_trace() -> FakeTrace:
    return FakeTrace(_kernels(), _ops(), _memory(), _steps(), _runtime(), _meta())


def _ops() -> pd.DataFrame:
    """Two steps on the main thread, backward on the autograd thread."""
    return _frame(
        "ops",
        [
            _op(0, "ProfilerStep#1", MAIN, 1000, 10000, -1, 0, 1, "user_annotation"),
            _op(1, "aten::linear", MAIN, 1100, 3000, 0, 1, 1, input_dims="[[8, 16], [32, 16]]"),
            _op(2, "aten::mm", MAIN, 1200, 2000, 1, 2, 1, external_id=7, sequence_number=3),
            _op(3, "aten::copy_", MAIN, 5000, 1000, 0, 1, 1),
            _op(4, "ProfilerStep#2", MAIN, 12000, 10000, -1, 0, 2, "user_annotation"),
            _op(5, "aten::mm", MAIN, 12100, 2000, 4, 1, 2),
            _op(6, "aten::zero_", MAIN, 15000, 500, 4, 1, 2),
            _op(
                7,
                "autograd::engine::evaluate_function: MmBackward0",
                AUTOGRAD,
                3000,
                4000,
                -1,
                0,
                1,
            ),
            _op(8, "aten::mm", AUTOGRAD, 3100, 2000, 7, 1, 1),
            _op(
                9,
                "autograd::engine::evaluate_function: MmBackward0",
                AUTOGRAD,
                16000,
                3000,
                -1,
                0,
                2,
            ),
            _op(10, "aten::mm", AUTOGRAD, 16100, 2000, 9, 1, 2),
            _op(11, "aten::add", MAIN, 18000, 1000, 4, 1, 2),
        ],
    )


def _runtime() -> pd.DataFrame:
    """Launches, a memcpy, a memset and a synchronize."""
    return _frame(
        "runtime",
        [
            _rt("cudaLaunchKernel", MAIN, 1300, 500, 11, 2, 1),
            _rt("cudaLaunchKernel", AUTOGRAD, 3200, 300, 16, 8, 1),
            _rt("cudaMemcpyAsync", MAIN, 5100, 300, 12, 3, 1),
            _rt("cudaLaunchKernel", MAIN, 12200, 400, 13, 5, 2),
            _rt("cudaMemsetAsync", MAIN, 15100, 100, 14, 6, 2),
            _rt("cudaLaunchKernel", AUTOGRAD, 16200, 300, 17, 10, 2),
            _rt("cudaLaunchKernel", MAIN, 18100, 200, 19, 11, 2),
            _rt("cudaDeviceSynchronize", MAIN, 23000, 100, 15, -1, -1),
        ],
    )


_LAUNCH = dict(
    grid_x=64,
    grid_y=2,
    grid_z=1,
    block_x=256,
    block_y=1,
    block_z=1,
    registers_per_thread=72,
    shared_memory=12288,
)


def _gpu(
    kind: str, name: str, device: int, stream: int, ts: int, dur: int, corr: int, step: int,
    op_id: int, op_name: str, **kw: Any,
) -> dict[str, Any]:  # fmt: skip
    return dict(
        kind=kind, name=name, device=device, stream=stream, ts=ts, dur=dur, correlation=corr,
        step=step, op_id=op_id, op_name=op_name, **kw,
    )  # fmt: skip


def _kernels() -> pd.DataFrame:
    """GEMMs on device 0's compute stream, a memcpy and a memset on its copy stream, one
    kernel on device 1."""
    small = dict(grid_x=4, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1)
    small.update(registers_per_thread=16, shared_memory=0)
    return _frame(
        "kernels",
        [
            _gpu("kernel", GEMM, 0, 7, 2000, 1500, 11, 1, 2, "aten::mm", **_LAUNCH),
            _gpu("kernel", BWD_GEMM, 0, 7, 4000, 1200, 16, 1, 8, "aten::mm", **_LAUNCH),
            _gpu("memcpy", HTOD, 0, 8, 5500, 200, 12, 1, 3, "aten::copy_", bytes=4096),
            _gpu("kernel", GEMM, 0, 7, 13000, 1500, 13, 2, 5, "aten::mm", **_LAUNCH),
            _gpu("memset", "Memset (Device)", 0, 8, 15500, 50, 14, 2, 6, "aten::zero_", bytes=1024),
            _gpu("kernel", BWD_GEMM, 0, 7, 17000, 1300, 17, 2, 10, "aten::mm", **_LAUNCH),
            _gpu(
                "kernel", "vectorized_add_kernel", 1, 7, 19000, 700, 19, 2, 11, "aten::add", **small
            ),
        ],
    )


def _memory() -> pd.DataFrame:
    """CUDA and CPU allocator events, one free."""
    return _frame(
        "memory",
        [
            dict(
                ts=1250,
                device_type=1,
                device=0,
                addr=0x7F00,
                bytes=1024,
                total_allocated=1024,
                total_reserved=2 << 20,
                op_id=2,
                op_name="aten::mm",
                step=1,
            ),
            dict(
                ts=3150,
                device_type=1,
                device=0,
                addr=0x7F80,
                bytes=2048,
                total_allocated=3072,
                total_reserved=2 << 20,
                op_id=8,
                op_name="aten::mm",
                step=1,
            ),
            dict(
                ts=5050,
                device_type=0,
                device=-1,
                addr=0x10,
                bytes=64,
                total_allocated=64,
                total_reserved=64,
                op_id=3,
                op_name="aten::copy_",
                step=1,
            ),
            dict(
                ts=9000,
                device_type=1,
                device=0,
                addr=0x7F00,
                bytes=-1024,
                total_allocated=2048,
                total_reserved=2 << 20,
                op_id=-1,
                op_name=None,
                step=1,
            ),
            dict(
                ts=12150,
                device_type=1,
                device=0,
                addr=0x7F00,
                bytes=512,
                total_allocated=2560,
                total_reserved=2 << 20,
                op_id=5,
                op_name="aten::mm",
                step=2,
            ),
        ],
    )


def _steps() -> pd.DataFrame:
    """The two profiler steps."""
    return _frame(
        "steps",
        [
            dict(
                step=1,
                name="ProfilerStep#1",
                cpu_ts=1000,
                cpu_dur=10000,
                gpu_ts=2000,
                gpu_dur=3700,
                gpu_busy=2900,
                kernel_count=3,
            ),
            dict(
                step=2,
                name="ProfilerStep#2",
                cpu_ts=12000,
                cpu_dur=10000,
                gpu_ts=13000,
                gpu_dur=6700,
                gpu_busy=4550,
                kernel_count=4,
            ),
        ],
    )


def _meta() -> dict[str, Any]:
    """Two H100s in the device properties."""
    props = [
        dict(
            id=i,
            name="NVIDIA H100 80GB HBM3",
            totalGlobalMem=85_000_000_000,
            computeMajor=9,
            computeMinor=0,
            numSms=132,
        )
        for i in (0, 1)
    ]
    return dict(schema_version=1, device_properties=props, trace_start_us=1.7e15)

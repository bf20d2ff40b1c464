"""Build small Kineto-format traces with known structure for parser tests.

The layout copies what PyTorch 2.x writes (categories, arg names, flow events,
[memory] instants, ProfilerStep annotations, nn.Module python frames), so every
link the parser makes has an exact expected answer.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID, BWD_TID = 100, 100, 101
T0 = 1_700_000_000_000_000  # microseconds


def op(name: str, ts: float, dur: float, ext: int, tid: int = TID, **args: Any) -> dict[str, Any]:
    a = {"External id": ext, **args}
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": T0 + ts,
        "dur": dur,
        "args": a,
    }


def annot(name: str, ts: float, dur: float, ext: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": PID,
        "tid": TID,
        "ts": T0 + ts,
        "dur": dur,
        "args": {"External id": ext},
    }


def launch(
    ts: float,
    corr: int,
    ext: int,
    tid: int = TID,
    name: str = "cudaLaunchKernel",
    dur: float = 1,
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": T0 + ts,
        "dur": dur,
        "args": {"External id": ext, "cbid": 211, "correlation": corr},
    }


def kernel(
    name: str, ts: float, dur: float, corr: int, ext: int, stream: int = 7, cat: str = "kernel"
) -> dict[str, Any]:
    args: dict[str, Any] = {"External id": ext, "device": 0, "stream": stream, "correlation": corr}
    if cat == "kernel":
        args.update(
            {
                "registers per thread": 32,
                "shared memory": 1024,
                "grid": [4, 2, 1],
                "block": [128, 1, 1],
            }
        )
    else:
        args["bytes"] = 4096
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": T0 + ts,
        "dur": dur,
        "args": args,
    }


def memory(ts: float, nbytes: int, total: int, addr: int = 1000, tid: int = TID) -> dict[str, Any]:
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": PID,
        "tid": tid,
        "ts": T0 + ts,
        "args": {
            "Device Type": 1,
            "Device Id": 0,
            "Addr": addr,
            "Bytes": nbytes,
            "Total Allocated": total,
            "Total Reserved": 2 * 1024 * 1024,
        },
    }


def module(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "python_function",
        "name": f"nn.Module: {name}",
        "pid": PID,
        "tid": TID,
        "ts": T0 + ts,
        "dur": dur,
        "args": {"Python id": 1},
    }


def small_trace() -> dict[str, Any]:
    """Two steps of a forward linear + backward + one memcpy; every link is known.

    Step 1 (ProfilerStep#1, 0..100 us):
      aten::linear (10..40) > aten::addmm (12..30) launches gemm kernel (corr 1)
        with a [memory] allocation at 13 us inside addmm;
      nn.Module Linear_0 (9..41) encloses aten::linear (module path Model_0.Linear_0);
      backward on thread 101: autograd::engine::evaluate_function: AddmmBackward0 (50..80)
        > AddmmBackward0 (51..79) > aten::mm (52..60) launches gemm kernel (corr 2)
        > aten::sum (61..70) launches reduce kernel (corr 3);
      aten::copy_ (85..95) launches a memcpy (corr 4).
    Step 2 (ProfilerStep#2, 100..200 us): aten::add_ (110..120) launches a kernel (corr 5);
      a kernel (corr 6) whose launch is missing from the trace but whose External id
      names aten::add_.
    """
    ev: list[dict[str, Any]] = [
        annot("ProfilerStep#1", 0, 100, 1),
        module("Model_0", 8, 42),
        module("Linear_0", 9, 32),
        op(
            "aten::linear",
            10,
            30,
            2,
            **{
                "Input Dims": [[8, 64], [32, 64], [32]],
                "Input type": ["float", "float", "float"],
                "Sequence number": 5,
                "Fwd thread id": 0,
            },
        ),
        op(
            "aten::addmm",
            12,
            18,
            3,
            **{
                "Input Dims": [[32], [8, 64], [64, 32], [], []],
                "Input type": ["float"] * 3 + ["Scalar"] * 2,
                "flops": 32768,
            },
        ),
        memory(13, 1024, 4096),
        launch(14, 1, 3),
        op("autograd::engine::evaluate_function: AddmmBackward0", 50, 30, 4, tid=BWD_TID),
        op("AddmmBackward0", 51, 28, 5, tid=BWD_TID),
        op("aten::mm", 52, 8, 6, tid=BWD_TID),
        launch(53, 2, 6, tid=BWD_TID),
        op("aten::sum", 61, 9, 7, tid=BWD_TID),
        launch(62, 3, 7, tid=BWD_TID),
        op("aten::copy_", 85, 10, 8),
        launch(86, 4, 8, name="cudaMemcpyAsync"),
        kernel("ampere_sgemm_32x32_sliced1x4_tn", 20, 5, 1, 3),
        kernel("ampere_sgemm_64x32_nn", 60, 4, 2, 6),
        kernel("void at::native::reduce_kernel<512, 1>(...)", 66, 3, 3, 7),
        kernel("Memcpy DtoH (Device -> Pageable)", 90, 2, 4, 8, cat="gpu_memcpy"),
        annot("ProfilerStep#2", 100, 100, 9),
        op("aten::add_", 110, 10, 10),
        launch(111, 5, 10),
        kernel("void at::native::vectorized_elementwise_kernel<4, add>(...)", 130, 2, 5, 10),
        kernel("void at::native::vectorized_elementwise_kernel<4, add>(...)", 140, 2, 6, 10),
        memory(115, -1024, 3072),
        {
            "ph": "f",
            "id": 5,
            "pid": PID,
            "tid": BWD_TID,
            "ts": T0 + 51,
            "cat": "fwdbwd",
            "name": "fwdbwd",
            "bp": "e",
        },
        {"ph": "s", "id": 1, "pid": PID, "tid": TID, "ts": T0 + 14, "cat": "ac2g", "name": "ac2g"},
        {
            "name": "thread_name",
            "ph": "M",
            "ts": T0,
            "pid": 0,
            "tid": 7,
            "args": {"name": "stream 7"},
        },
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "numSms": 132,
                "totalGlobalMem": 85_000_000_000,
                "computeMajor": 9,
                "computeMinor": 0,
            }
        ],
        "cuda_runtime_version": 12080,
        "traceEvents": ev,
        "traceName": "small",
        "displayTimeUnit": "ms",
    }


def write(doc: Any, path: Path, *, gz: bool | None = None, indent: int | None = 1) -> Path:
    text = json.dumps(doc, indent=indent)
    data = text.encode()
    if gz if gz is not None else path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path

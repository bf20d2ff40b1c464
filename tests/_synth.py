"""Small parsed-trace tables built by hand, following tracekit/schema.py, for classify tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.schema import KERNELS, OPS, STEPS

H100 = [
    {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85018279936,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
        "warpSize": 32,
    }
]


@dataclass
class Trace:
    kernels: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None


def _frame(rows: list[dict[str, Any]], cols: list[Any], defaults: dict[str, Any]) -> pd.DataFrame:
    data = {c.name: [r.get(c.name, defaults.get(c.name)) for r in rows] for c in cols}
    return pd.DataFrame(data)


def j(x: Any) -> str:
    return json.dumps(x)


class Builder:
    """Build ops and kernels: ``op(...)`` returns the op id, ``kernel(...)`` the kernel id."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self.kernels: list[dict[str, Any]] = []
        self.t = 0

    def op(
        self,
        name: str,
        parent: int = -1,
        *,
        dims: Any = None,
        types: Any = None,
        concrete: Any = None,
        category: str = "cpu_op",
        step: int = 0,
        flops: float | None = None,
    ) -> int:
        oid = len(self.ops)
        depth = 0 if parent < 0 else self.ops[parent]["depth"] + 1
        self.ops.append(
            {
                "op_id": oid,
                "category": category,
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": oid * 10,
                "dur": 5,
                "parent": parent,
                "depth": depth,
                "input_dims": j(dims) if dims is not None else None,
                "input_types": j(types) if types is not None else None,
                "concrete_inputs": j(concrete) if concrete is not None else None,
                "flops": flops,
                "step": step,
            }
        )
        return oid

    def kernel(
        self,
        name: str,
        op_id: int = -1,
        dur: int = 1000,
        *,
        kind: str = "kernel",
        step: int = 0,
        nbytes: int | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1),
        gap: int = 0,
    ) -> int:
        kid = len(self.kernels)
        self.t += gap
        self.kernels.append(
            {
                "kernel_id": kid,
                "kind": kind,
                "name": name,
                "device": 0,
                "stream": 7,
                "ts": self.t,
                "dur": dur,
                "correlation": 100 + kid,
                "step": step,
                "op_id": op_id,
                "op_name": self.ops[op_id]["name"] if op_id >= 0 else None,
                "bytes": nbytes,
                "grid_x": grid[0],
                "grid_y": grid[1],
                "grid_z": grid[2],
                "block_x": block[0],
                "block_y": block[1],
                "block_z": block[2],
                "top_op_name": self._top(op_id) if op_id >= 0 else None,
            }
        )
        self.t += dur
        return kid

    def _top(self, op_id: int) -> str:
        cur = op_id
        while self.ops[cur]["parent"] >= 0 and self.ops[self.ops[cur]["parent"]]["category"] == (
            "cpu_op"
        ):
            cur = self.ops[cur]["parent"]
        return str(self.ops[cur]["name"])

    def trace(
        self,
        *,
        props: list[dict[str, Any]] | None = None,
        manifest: dict[str, Any] | None = None,
        steps: pd.DataFrame | None = None,
    ) -> Trace:
        k = _frame(self.kernels, KERNELS, {"external_id": -1, "runtime_id": -1, "top_op_id": -1})
        o = _frame(
            self.ops,
            OPS,
            {"external_id": -1, "sequence_number": -1, "fwd_thread_id": -1, "is_backward": False},
        )
        if steps is None:
            rows = []
            for s in sorted({r["step"] for r in self.kernels if r["step"] >= 0}):
                m = k[k["step"] == s]
                start, end = int(m["ts"].min()), int((m["ts"] + m["dur"]).max())
                rows.append(
                    {
                        "step": s,
                        "name": f"ProfilerStep#{s}",
                        "cpu_ts": 0,
                        "cpu_dur": 0,
                        "gpu_ts": start,
                        "gpu_dur": end - start,
                        "gpu_busy": int(m["dur"].sum()),
                        "kernel_count": len(m),
                    }
                )
            steps = _frame(rows, STEPS, {})
        for c in ("dur", "ts"):
            k[c] = k[c].astype(np.int64)
        return Trace(
            k, o, steps, {"device_properties": props if props is not None else H100}, manifest
        )

"""A hand-written stand-in for ``tracekit.classify.classify`` on tests/reportgen.py's trace.

It follows CLASSIFY_CONTRACT.md (column names of ``kernels``, ``ops``, ``device``), with
every class, FLOP and byte count written out by hand below, so rendering tests have
exact expected figures. It is test data only: the report command itself always calls the
real classify stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import reportgen as rg

# op name -> (class, FLOPs, bytes, source). FLOPs: 2·M·N·K for the GEMMs (addmm 8x64 @
# 64x32, mm 8x32 @ 32x64 scaled up to be compute-bound), invented counts for the rest.
OPS: dict[str, tuple[str, float | None, float | None, str]] = {
    "aten::addmm": ("gemm", 32768.0, 11392.0, "profiler"),
    "aten::mm": ("gemm", 4.0e6, 11264.0, "modelled"),
    "aten::sum": ("reduction", 2048.0, 8320.0, "modelled"),
    "aten::copy_": ("memcpy", 0.0, 4096.0, "modelled"),
    "aten::add_": ("elementwise", 1024.0, 12288.0, "modelled"),
    "aten::_softmax": ("softmax", 5120.0, 8192.0, "modelled"),
    "aten::native_layer_norm": ("layernorm", 8192.0, 8320.0, "modelled"),
    rg.HOSTILE_OP: ("other", None, None, "none"),
}
PEAKS = {"simt_fp32": 60e12, "tensor_tf32": 400e12}  # invented test device
BANDWIDTH = 3e12
PIPE = "simt_fp32"


@dataclass
class StandIn:
    kernels: pd.DataFrame
    ops: pd.DataFrame
    classes: pd.DataFrame
    steps: pd.DataFrame
    device: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def _bound(flops: float | None, nbytes: float | None) -> tuple[float, str]:
    if flops is None or not nbytes:
        return float("nan"), "unknown"
    i = flops / nbytes
    return i, ("compute-bound" if i >= PEAKS[PIPE] / BANDWIDTH else "memory-bound")


def classification(trace: Any) -> StandIn:
    k = trace.kernels
    rows = []
    for r in k.itertuples(index=False):
        cls, flops, nbytes, src = OPS[r.op_name]
        # one op's FLOPs/bytes are split over its kernels by duration
        same = k[k.op_id == r.op_id]
        frac = r.dur / same.dur.sum()
        f = flops * frac if flops is not None else None
        b = nbytes * frac if nbytes is not None else None
        inten, bound = _bound(f, b)
        secs = r.dur / 1e9
        roof = min(PEAKS[PIPE], BANDWIDTH * inten) if bound != "unknown" else float("nan")
        att = f / secs if f is not None else float("nan")
        rows.append(
            {
                "kernel_id": r.kernel_id,
                "name": r.name,
                "kind": r.kind,
                "class": cls,
                "op_id": r.op_id,
                "op_name": r.op_name,
                "step": r.step,
                "ts": r.ts,
                "dur": r.dur,
                "flops": f if f is not None else float("nan"),
                "bytes": b if b is not None else float("nan"),
                "intensity": inten,
                "pipe": PIPE,
                "peak_flops": PEAKS[PIPE],
                "peak_bw": BANDWIDTH,
                "ridge": PEAKS[PIPE] / BANDWIDTH,
                "bound": bound,
                "attained_flops": att,
                "attained_bw": (b / secs) if b is not None else float("nan"),
                "roof_pct": 100.0 * att / roof if roof == roof and roof > 0 else float("nan"),
                "source": src,
            }
        )
    kern = pd.DataFrame(rows)
    o = trace.ops.set_index("op_id")
    g = kern.groupby("op_id")
    ops = pd.DataFrame(
        {
            "op_id": list(g.groups),
            "name": g["op_name"].first().to_numpy(),
            "class": g["class"].first().to_numpy(),
            "step": g["step"].first().to_numpy(),
            "gpu_dur": g["dur"].sum().to_numpy(),
            "kernel_count": g.size().to_numpy(),
            "flops": g["flops"].sum(min_count=1).to_numpy(),
            "bytes": g["bytes"].sum(min_count=1).to_numpy(),
        }
    )
    ops["input_dims"] = [o.loc[i, "input_dims"] for i in ops["op_id"]]
    ops["input_types"] = [o.loc[i, "input_types"] for i in ops["op_id"]]
    ops["module"] = [o.loc[i, "module"] for i in ops["op_id"]]
    ops["intensity"] = ops["flops"] / ops["bytes"]
    secs = ops["gpu_dur"] / 1e9
    ops["attained_flops"] = ops["flops"] / secs
    ops["attained_bw"] = ops["bytes"] / secs
    ops["pipe"] = PIPE
    ops["ridge"] = PEAKS[PIPE] / BANDWIDTH
    ops["bound"] = [
        _bound(f if f == f else None, b if b == b else None)[1]
        for f, b in zip(ops["flops"], ops["bytes"], strict=True)
    ]
    roof = np.minimum(PEAKS[PIPE], BANDWIDTH * ops["intensity"])
    ops["roof_pct"] = 100.0 * ops["attained_flops"] / roof
    ops["source"] = [OPS[n][3] for n in ops["name"]]
    device = pd.DataFrame(
        [
            {
                "device": "NVIDIA H100 80GB HBM3",
                "spec": "test",
                "pipe": p,
                "peak_flops": v,
                "peak_source": "test stand-in",
                "bandwidth": BANDWIDTH,
                "bandwidth_source": "test stand-in",
                "ridge": v / BANDWIDTH,
            }
            for p, v in PEAKS.items()
        ]
    )
    return StandIn(
        kernels=kern,
        ops=ops,
        classes=pd.DataFrame(),
        steps=pd.DataFrame(),
        device=device,
        notes=["test stand-in for the classify stage"],
    )

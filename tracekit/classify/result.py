"""What :func:`tracekit.classify.roofline.classify` returns: :class:`Classification`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.devices import Roofline


@dataclass
class Classification:
    """The roofline tables of one trace (columns: :mod:`tracekit.classify.schema`)."""

    kernels: pd.DataFrame
    ops: pd.DataFrame
    classes: pd.DataFrame
    steps: pd.DataFrame
    device: Roofline
    notes: list[str] = field(default_factory=list)
    counters: pd.DataFrame | None = None
    unmatched: pd.DataFrame | None = None

    def device_frame(self) -> pd.DataFrame:
        return self.device.frame()

    def agreement(self) -> pd.DataFrame:
        """Modelled vs measured FLOPs and DRAM bytes per class, over the kernels that have
        counters and a model (the analysed steps): ``kernels``, ``flops_model``,
        ``flops_measured``, ``flops_ratio`` (measured / modelled), ``bytes_model``,
        ``bytes_measured``, ``bytes_ratio``, ``l2_bytes``, ``extrapolated`` (kernels whose
        counters came from another launch of the same signature)."""
        cols = [
            "kernels",
            "flops_model",
            "flops_measured",
            "flops_ratio",
            "bytes_model",
            "bytes_measured",
            "bytes_ratio",
            "l2_bytes",
            "extrapolated",
        ]
        k = self.kernels[in_scope(self.kernels)]
        k = k[(k["source"] == "measured") & np.isfinite(k["flops_model"])]
        if not len(k):
            return cast(pd.DataFrame, pd.DataFrame(columns=["class", *cols]))
        g = k.groupby("class")
        out = pd.DataFrame(
            {
                "kernels": g.size(),
                "flops_model": g["flops_model"].sum(),
                "flops_measured": g["flops"].sum(),
                "bytes_model": g["bytes_model"].sum(),
                "bytes_measured": g["bytes"].sum(),
                "l2_bytes": g["l2_bytes"].sum(),
                "extrapolated": g["extrapolated"].sum(),
            }
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            out["flops_ratio"] = out["flops_measured"] / out["flops_model"]
            out["bytes_ratio"] = out["bytes_measured"] / out["bytes_model"]
        return cast(pd.DataFrame, out[cols].reset_index())

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: device, notes, per-class and per-step figures."""
        return {
            "device": self.device.to_dict(),
            "notes": list(self.notes),
            "classes": records(self.classes),
            "steps": records(self.steps),
            "sources": self.kernels["source"].value_counts().to_dict() if len(self.kernels) else {},
        }


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for rec in df.to_dict(orient="records"):
        out.append(
            {
                str(k): (
                    None
                    if isinstance(v, float) and not math.isfinite(v)
                    else (v.item() if hasattr(v, "item") else v)
                )
                for k, v in rec.items()
            }
        )
    return out


def in_scope(kr: pd.DataFrame) -> np.ndarray:
    """Kernels of the analysed steps (all of them for a trace without steps)."""
    st = kr["step"].to_numpy()
    return st >= 0 if (st >= 0).any() else np.ones(len(kr), dtype=bool)


def n_steps(kr: pd.DataFrame) -> int:
    return max(1, int(kr["step"].nunique()))

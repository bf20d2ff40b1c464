"""The KV cache of a generate run over its decode steps.

The cache is preallocated for the whole context (prompt + new tokens), so the allocator
shows all of it before the prefill; the part that holds tokens grows by 2·L·B·C·b bytes
per decode step (one token of every sequence, keys and values of every layer). That
filled part is what a paged cache (vLLM's PagedAttention) would hold, and what the
report draws over the memory timeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.models.decode import DecodeModel
from tracekit.manifest import manifest_or_empty


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class KVGrowth:
    """The KV cache over the recorded decode steps (bytes)."""

    steps: list[int]
    step_starts_ns: list[int]
    context: list[int]  # tokens held after step d wrote its own: prompt + d + 1
    filled_bytes: list[int]  # 2·L·B·context·C·b
    prefill_bytes: int  # after the prefill: 2·L·B·prompt·C·b
    allocated_bytes: int  # preallocated, as measured (allocator growth; CPU: nbytes)
    formula_bytes: int  # 2·L·B·(prompt + new_tokens)·C·b
    per_token_bytes: int  # one token of one sequence: 2·L·C·b
    per_step_bytes: int  # one decode step of all sequences: B·per_token_bytes
    weights_bytes: int | None
    allocated_at_step: list[float]  # the allocator's total at each step's start (trace)

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_token_bytes": self.per_token_bytes,
            "per_step_bytes": self.per_step_bytes,
            "prefill_bytes": self.prefill_bytes,
            "preallocated_bytes": self.allocated_bytes,
            "formula_bytes": self.formula_bytes,
            "weights_bytes": self.weights_bytes,
            "first_step_filled_bytes": self.filled_bytes[0] if self.filled_bytes else None,
            "last_step_filled_bytes": self.filled_bytes[-1] if self.filled_bytes else None,
            "filled_pct_at_last_step": (
                100.0 * self.filled_bytes[-1] / self.formula_bytes
                if self.filled_bytes and self.formula_bytes
                else None
            ),
            "per_step": [
                {"step": s, "context": c, "filled_bytes": f, "allocated_bytes": a}
                for s, c, f, a in zip(
                    self.steps,
                    self.context,
                    self.filled_bytes,
                    self.allocated_at_step,
                    strict=True,
                )
            ],
        }


def _allocated_at(timeline: pd.DataFrame, ts: list[int]) -> list[float]:
    """The allocator's total at each time (the last [memory] event at or before it)."""
    if not len(timeline) or not ts:
        return [math.nan] * len(ts)
    t = timeline["ts"].to_numpy(dtype=np.int64)
    a = timeline["allocated"].to_numpy(dtype=np.float64)
    i = np.searchsorted(t, np.asarray(ts, dtype=np.int64), side="right") - 1
    return [float(a[j]) if j >= 0 else math.nan for j in i.tolist()]


def kv_growth(
    manifest: Any, steps: list[int], step_starts_ns: list[int], timeline: pd.DataFrame
) -> KVGrowth | None:
    """The KV cache's filled part at each recorded decode step (None: not a generate
    run). ``timeline``: :func:`tracekit.summary.memory.timeline` of the trace."""
    dm = DecodeModel.model_of(manifest)
    if dm is None:
        return None
    man = manifest_or_empty(manifest)
    g = man.generate or {}
    B = dm.batch
    per_token = dm.shape.kv_bytes_per_token(dm.dtype)
    ctx = [dm.prompt + int(d) + 1 for d in steps]
    mem = man.metrics.memory or {}
    weights = _num(mem.get("weights_bytes")) or _num(g.get("weight_bytes"))
    measured = _num(g.get("kv_cache_bytes_measured"))
    formula = dm.kv_cache_bytes()
    return KVGrowth(
        steps=[int(d) for d in steps],
        step_starts_ns=[int(t) for t in step_starts_ns],
        context=ctx,
        filled_bytes=[B * per_token * c for c in ctx],
        prefill_bytes=B * per_token * dm.prompt,
        allocated_bytes=int(measured) if measured is not None else formula,
        formula_bytes=formula,
        per_token_bytes=per_token,
        per_step_bytes=B * per_token,
        weights_bytes=int(weights) if weights is not None else None,
        allocated_at_step=_allocated_at(timeline, [int(t) for t in step_starts_ns]),
    )

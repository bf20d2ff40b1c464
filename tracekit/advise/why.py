"""Why a measured lever slowed the step, in one line, from its run's own analysis.

Each measured row is a ``tracekit collect`` run; its summary has a verdict (the step's
split into GPU work, exposed communication, input wait and host idle) and its trace the
host's outermost operators. Against the re-measured baseline's, they say what changed:
``bf16: x1.23 slower: the step becomes launch/host-bound (the re-measured baseline:
compute-bound): host idle 36 % of the unprofiled 30.1 ms step; 1,510 -> 2,700 host operators
per step, 24.1 -> 32.3 ms of traced host work per step (+8.2 ms)``. Pure: facts in, a line
out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SHARE_WORDS = {
    "host_idle": "host idle",
    "gpu_work": "GPU work",
    "exposed_communication": "exposed communication",
    "input_wait": "input wait",
}
VERDICT_SHARE = {  # the share of the step that names each verdict's cause
    "launch/host-bound": "host_idle",
    "communication-bound": "exposed_communication",
    "input-bound": "input_wait",
    "compute-bound": "gpu_work",
    "memory-bandwidth-bound": "gpu_work",
}


@dataclass(frozen=True)
class RunFacts:
    """What one measured run's analysis says about its step."""

    verdict: str | None  # None: no GPU verdict (a CPU run)
    shares_pct: dict[str, float]  # the verdict's split of the step
    step_ms: float  # the step the split is of (unprofiled where known)
    host_ops: float  # outermost host operators per profiled step
    host_ms: float  # their traced time per profiled step (profiler included)
    verdict_why: str | None = None  # why the verdict is "unknown" (None: it is not)


def facts(trace: Any, summary: Any) -> RunFacts:
    """A run's :class:`RunFacts` from its parsed trace and summary."""
    v = getattr(summary, "verdict", None)
    ops = trace.ops
    cpu = (ops["category"] == "cpu_op").to_numpy(bool)
    parent = ops["parent"].to_numpy(np.int64)
    has = (parent >= 0) & (parent < len(ops))
    under_op = np.zeros(len(ops), bool)
    under_op[has] = cpu[parent[has]]
    # outermost operators: not inside another operator (annotations such as the step's
    # ProfilerStep# do not count)
    top = ops[cpu & ~under_op & (ops["step"] >= 0).to_numpy(bool)]
    steps = max(1, int(top["step"].nunique()))
    b = getattr(summary, "breakdown", None)
    verdict = None if v is None else str(v.verdict)
    return RunFacts(
        verdict=verdict,
        shares_pct={} if v is None else {str(k): float(x) for k, x in v.shares_pct.items()},
        step_ms=float(getattr(b, "step_ms", math.nan)) if b is not None else math.nan,
        host_ops=len(top) / steps,
        host_ms=float(top["dur"].sum()) / 1e6 / steps,
        verdict_why=unknown_why(trace, v.evidence)
        if v is not None and verdict == UNKNOWN
        else None,
    )


UNKNOWN = "unknown"  # tracekit.summary.verdict's verdict without a known bound
ORPHAN_PCT = 50.0  # share of GPU time without a launching operator that explains it


def unknown_why(trace: Any, evidence: list[str]) -> str:
    """Why a run's verdict is ``unknown``: where most of its GPU time is in kernels that no
    traced operator launched (a CUDA graph replays its kernels without the operators that
    captured them; an annotation such as ``ProfilerStep#`` is not an operator), that share;
    else the verdict's own first line of evidence."""
    k, ops = trace.kernels, trace.ops
    dur = k["dur"].to_numpy(float)
    op = k["op_id"].to_numpy(np.int64)
    is_op = (ops["category"] == "cpu_op").to_numpy(bool)
    ok = (op >= 0) & (op < len(ops))
    orphan = ~ok  # launched outside any operator, or inside an annotation only
    orphan[ok] = ~is_op[op[ok]]
    pct = 100.0 * float(dur[orphan].sum()) / float(dur.sum()) if dur.sum() > 0 else 0.0
    if pct >= ORPHAN_PCT:
        return (
            f"{pct:.0f} % of its GPU time is in kernels no traced operator launched (a CUDA "
            "graph replays them without their operators): no shapes, so no FLOP or byte "
            "counts to tell compute- from memory-bound; the GPU, not the host, is the limit"
        )
    return evidence[0] if evidence else "the summary gives no reason"


def _short(verdict: str | None) -> str:
    return "n/a" if verdict is None else verdict


def slower_line(
    lever: str, ratio: float, interval: str, before: RunFacts | None, after: RunFacts | None
) -> str | None:
    """One line on why ``lever`` slowed the step (``ratio`` > 1 against the baseline,
    ``interval`` its text), from the lever run's analysis against the baseline's; None
    where it did not slow the step or its run has no analysis."""
    if after is None or not ratio > 1.0:
        return None
    parts = [f"{lever}: x{ratio:.2f} slower ({interval})"]
    if after.verdict is not None:
        was = before.verdict if before is not None else None
        if was is not None and was != after.verdict:
            # the re-measured baseline's, which can differ from the original run's verdict
            # near a boundary: named, so that the header's verdict does not contradict it
            parts.append(
                f"the step becomes {after.verdict} (the re-measured baseline: {_short(was)})"
            )
        else:
            parts.append(f"the step stays {after.verdict}")
        share = VERDICT_SHARE.get(after.verdict)
        if share is not None and share in after.shares_pct and math.isfinite(after.step_ms):
            parts.append(
                f"{SHARE_WORDS[share]} {after.shares_pct[share]:.0f} % of the "
                f"{after.step_ms:.1f} ms step"
            )
    if before is not None:
        d_ops, d_ms = after.host_ops - before.host_ops, after.host_ms - before.host_ms
        parts.append(
            f"{before.host_ops:,.0f} -> {after.host_ops:,.0f} host operators per step "
            f"({d_ops:+,.0f}), {before.host_ms:.1f} -> {after.host_ms:.1f} ms of traced host "
            f"work per step ({d_ms:+.1f} ms)"
        )
    return parts[0] + ": " + "; ".join(parts[1:]) if len(parts) > 1 else parts[0]

"""The critical path's what-ifs on the real step's basis (docs/critical-path.md, "On the
unprofiled step").

The graph is built from the profiled window, whose host time the profiler stretches
(1.2-3x on a host-bound step). A what-if taken from it answers for the profiled run: CUDA
graphs offered 4.03x on a ViT step whose unprofiled step is 12.54 ms with 9.37 ms of GPU
work. :func:`anchor` moves the what-ifs to the unprofiled step: its baseline is the step
measured without the profiler, the host's time is scaled by the calibrated speed-up
(``calibrate_host``), what remains is a plain scale, and a change that only removes host
time can never give more than the unprofiled step over its GPU work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.critical_path.analysis as CP
import tracekit.summary.critical_path.tables as T

HOST_ONLY = ("launch_free", "cuda_graphs")  # and every host_x<k>: they remove host time only
FLOOR_TOL = 0.01  # 'gpu-floor': the host is sped up until the path is within 1 % of the GPU's
WHAT_IF_COLUMNS = ["scenario", "description", "path_ms", "delta_ms", "delta_pct", "speedup"]


def host_only(name: str) -> bool:
    """Whether a what-if only removes host time (its gain is bounded by the GPU's work)."""
    return name in HOST_ONLY or name.startswith("host_x")


@dataclass
class Anchor:
    """The what-ifs on the unprofiled step (ms per step)."""

    measured_ms: float  # the step measured without the profiler (the baseline)
    gpu_ms: float  # GPU work per step (union of its GPU activity, the trace's kernels)
    basis: str  # 'calibrated', 'gpu-floor' or 'scaled' (see _host_speedup)
    host_speedup: float  # k applied to the traced host time (1: none)
    scale: float  # what remained after k: measured / predicted (1 when calibrated)
    cap: float  # measured / GPU work: the most a host-only change can give
    bound: str  # the calibrated path's bound ('gpu', 'host', 'mixed')
    groups_ms: dict[str, float]  # the calibrated path per group, scaled to the measured step
    what_if: pd.DataFrame  # WHAT_IF_COLUMNS + 'capped'
    notes: list[str] = field(default_factory=list)

    def block(self) -> dict[str, Any]:
        """The ``unprofiled`` part of ``summary.json``'s ``critical_path`` block."""
        return {
            "basis": self.basis,
            "measured_step_ms": self.measured_ms,
            "gpu_work_ms": self.gpu_ms,
            "host_speedup": self.host_speedup,
            "scale": self.scale,
            "host_only_cap": self.cap,
            "bound": self.bound,
            "groups_ms": self.groups_ms,
            "what_if": {
                r.scenario: {
                    "path_ms": r.path_ms,
                    "delta_pct": r.delta_pct,
                    "speedup": r.speedup,
                    "capped": bool(r.capped),
                }
                for r in self.what_if.itertuples()
            },
            "notes": self.notes,
        }


def anchor(
    cp: CP.CriticalPath,
    measured_ms: float,
    gpu_ms: float,
    scenarios: Sequence[CP.Scenario] | None = None,
) -> Anchor | None:
    """The what-ifs of ``cp`` (default: its own scenarios) on the unprofiled step of
    ``measured_ms`` with ``gpu_ms`` of GPU work per step; None without a usable step."""
    if not (measured_ms > 0) or not cp.steps or not cp.what_if_steps:
        return None
    k, basis = _host_speedup(cp, measured_ms)
    host = CP.host_speedup(k)
    raw = CP.predict(cp, host)
    if not raw > 0:
        return None
    scale = measured_ms / raw
    cap = measured_ms / gpu_ms if gpu_ms > 0 else float("inf")  # NaN: no cap
    rows = []
    for sc in scenarios if scenarios is not None else cp.scenarios:
        p = CP.predict(cp, CP.then(host, sc)) * scale
        capped = host_only(sc.name) and p < measured_ms / cap
        p = max(p, measured_ms / cap) if host_only(sc.name) else p
        d = p - measured_ms
        rows.append(
            (sc.name, sc.description, p, d, 100.0 * d / measured_ms, measured_ms / p, capped)
        )
    wi = pd.DataFrame(rows, columns=[*WHAT_IF_COLUMNS, "capped"])
    # at the GPU floor the unprofiled step follows the GPU's path: solve it with a free host
    bound, groups = _bound(cp, CP.host_speedup(1e6) if basis == "gpu-floor" else host, measured_ms)
    out = Anchor(measured_ms, gpu_ms, basis, k, scale, cap, bound, groups, wi)
    out.notes = _notes(cp, out)
    return out


def _host_speedup(cp: CP.CriticalPath, measured_ms: float) -> tuple[float, str]:
    """The host speed-up to apply and its basis: 'calibrated' (the path then equals the
    measured step), 'gpu-floor' (the measured step is shorter than even the GPU's path in
    the profiled window: the host is sped up until the GPU's path binds) or 'scaled'
    (no host speed-up: the path is the GPU's already, or not longer than the step)."""
    k = cp.host_speedup if cp.host_speedup is not None else CP.calibrate_host(cp, measured_ms)
    if k is not None:
        return float(k), "calibrated" if k > 1.0 else "scaled"
    floor = CP.predict(cp, CP.host_speedup(1e6))
    k = CP.calibrate_host(cp, floor * (1 + FLOOR_TOL))
    return (float(k), "gpu-floor") if k is not None and k > 1.0 else (1.0, "scaled")


def _bound(
    cp: CP.CriticalPath, host: CP.Scenario, measured_ms: float
) -> tuple[str, dict[str, float]]:
    """The calibrated path's time per group (scaled to the measured step) and its bound,
    by the rule of ``critical_path._summary`` (>= 80 % of the path in one group)."""
    keys = list(cp.graphs[0].graph.keys)
    want = set(cp.what_if_steps)
    sols = [CP.solve_step(sg, host, cp.copies) for sg in cp.graphs if sg.step in want]
    on = np.sum([s.on_path_ns for s in sols], axis=0)
    total = float(on.sum())
    groups = {"gpu": 0.0, "host": 0.0, "launch": 0.0, "idle": 0.0}
    for i, key in enumerate(keys):
        g = CP.GROUPS.get(key, "gpu") if key in T.CATEGORIES else "gpu"
        groups[g] += float(on[i])
    share = {g: v / total if total else 0.0 for g, v in groups.items()}
    bound = "gpu" if share["gpu"] >= 0.8 else "host" if share["host"] >= 0.8 else "mixed"
    return bound, {g: measured_ms * s for g, s in share.items()}


def _notes(cp: CP.CriticalPath, a: Anchor) -> list[str]:
    traced = cp.summary.path_ms
    out = []
    if a.basis == "calibrated":
        out.append(
            f"what-ifs on the unprofiled step ({a.measured_ms:.2f} ms): the profiled window's "
            f"path ({traced:.2f} ms) with its host time {a.host_speedup:.2f}x faster, the "
            "profiler's own cost on each operator taken out"
        )
    elif a.basis == "gpu-floor":
        out.append(
            f"what-ifs on the unprofiled step ({a.measured_ms:.2f} ms): the profiled window's "
            f"path ({traced:.2f} ms) with its host time {a.host_speedup:.2f}x faster, until the "
            f"GPU's path binds, scaled by {a.scale:.3f} (the unprofiled step is shorter than "
            "even the profiled window's GPU path)"
        )
    else:
        why = (
            "the path is the GPU's even with a free host: the host cannot be calibrated, and "
            "GPU what-ifs stop at the profiled window's host time (an upper bound)"
            if cp.host_speedup is None
            else "the profiled path is not longer than the unprofiled step"
        )
        out.append(
            f"what-ifs on the unprofiled step ({a.measured_ms:.2f} ms): the profiled window's "
            f"path ({traced:.2f} ms) scaled by {a.scale:.3f}; {why}"
        )
    n = int(a.what_if["capped"].sum())
    if n:
        out.append(
            f"{n} host-only what-if(s) capped at the GPU's work ({a.gpu_ms:.2f} ms per step): "
            f"removing host time cannot give more than {a.cap:.2f}x"
        )
    if cp.summary.bound != a.bound:
        out.append(
            f"the profiled window's path is {cp.summary.bound}-bound, the unprofiled step's "
            f"{a.bound}-bound: the profiled window's host time is the profiler's"
        )
    return out


def gpu_work_ms(trace: Any, steps: Sequence[int]) -> float:
    """GPU work per step: the mean union of each step's GPU activity (``steps.gpu_busy``)."""
    st = trace.steps
    sel = st[st["step"].isin(list(steps))]["gpu_busy"].dropna()
    return float(sel.mean()) / 1e6 if len(sel) else float("nan")


def for_summary(trace: Any, cp: CP.CriticalPath | None) -> Anchor | None:
    """The report's anchor: ``cp``'s what-ifs on the manifest's unprofiled step (None for
    a trace without one, or without a critical path)."""
    if cp is None or cp.measured_ms is None:
        return None
    return anchor(cp, cp.measured_ms, gpu_work_ms(trace, cp.steps))


_VERDICT_PATH = {
    "compute-bound": "gpu",
    "memory-bandwidth-bound": "gpu",
    "launch/host-bound": "host",
}


def path_bound(cp: CP.CriticalPath, a: Anchor | None) -> tuple[str, str, float, float]:
    """The critical path's bound to show beside the verdict, the pass it is of, and the
    GPU's and the host's share of that path (%): the unprofiled step's where anchored."""
    if a is not None:
        total = sum(a.groups_ms.values()) or float("nan")
        return (
            a.bound,
            "unprofiled step",
            100 * a.groups_ms["gpu"] / total,
            100 * (a.groups_ms["host"] / total),
        )
    s = cp.summary
    p = s.path_ms or float("nan")
    return s.bound, "profiled window", 100 * s.gpu_ms / p, 100 * s.host_ms / p


def disagreement(verdict: str | None, cp: CP.CriticalPath | None, a: Anchor | None) -> str | None:
    """One line saying why the step's verdict and the critical path's bound differ (None
    when they agree, or when either is missing). The verdict splits the unprofiled step
    into GPU work and the rest; the path's bound needs 80 % of the path in one group."""
    if verdict is None or cp is None or verdict not in _VERDICT_PATH:
        return None
    bound, of, gpu, host = path_bound(cp, a)
    want = _VERDICT_PATH[verdict]
    if bound == want:
        return None
    shares = f"GPU {gpu:.0f} %, host {host:.0f} % of the path"
    if bound == "mixed":
        return (
            f"the verdict says {verdict}; the {of}'s critical path is mixed ({shares}): "
            "neither holds 80 % of it, so both the GPU's work and the host's time pay"
        )
    why = (
        "the profiled window's host time is the profiler's"
        if of == "profiled window" and want == "gpu"
        else "the split and the path weigh overlap differently"
    )
    return (
        f"the verdict says {verdict}; the {of}'s critical path is {bound}-bound ({shares}): {why}"
    )

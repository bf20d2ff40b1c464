"""A lever's effect on the baseline step, as a what-if on the step's critical-path graph.

An :class:`Effect` says, per GPU activity of the trace, by how much its duration changes
or whether it disappears (then its launch edge, and the gap before it, go too), and by how
much the host time inside each :class:`~tracekit.advise.regions.Region` changes. It is
independent of any one step's graph; :func:`scenario` turns it into a
``tracekit.summary.critical_path.Scenario`` that re-weights each analysed step's graph.

Host time is re-weighted per chain edge of a CPU thread: an edge whose span lies a share
``s`` inside a region with factor ``f`` gets its host components (operators, launch and
other runtime calls, untraced time; waits are left to the solver) multiplied by
``1 - s + s·f`` — exact for the edge's total when the region's share of each component
is the same as of its span.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

import tracekit.summary.critical_path as CP
import tracekit.summary.critical_path.build as B
import tracekit.summary.critical_path.tables as T
from tracekit.advise.regions import Region, covered
from tracekit.summary.critical_path.graph import Weights

HOST_KEYS = (T.CPU_OP, T.CPU_LAUNCH, T.CPU_RUNTIME, T.CPU_UNTRACED)  # scaled; waits are not
_THREAD = re.compile(r"^thread (\d+)")


@dataclass(frozen=True)
class Effect:
    """Per trace kernel row: a duration multiplier, whether it is removed (no duration,
    launch or gap) or merged into the kernel before it (its launch and the gap before it
    go, its duration stays); per region: a host-time factor; whole-graph scenarios applied
    with it."""

    kernel_mult: np.ndarray  # float, 1.0 = unchanged
    removed: np.ndarray  # bool
    merged: np.ndarray  # bool (removed kernels are merged too)
    host: tuple[tuple[Region, float], ...] = ()
    also: tuple[CP.Scenario, ...] = field(default_factory=tuple)

    @classmethod
    def none(cls, n_kernels: int) -> Effect:
        return cls(np.ones(n_kernels), np.zeros(n_kernels, bool), np.zeros(n_kernels, bool))

    def then(self, other: Effect) -> Effect:
        """Both effects (multipliers multiply; removed or merged by either)."""
        return Effect(
            self.kernel_mult * other.kernel_mult,
            self.removed | other.removed,
            self.merged | other.merged | self.removed | other.removed,
            self.host + other.host,
            self.also + other.also,
        )


def host_weights(sg: B.StepGraph, region: Region, factor: float) -> dict[int, float]:
    """Component multipliers for the host time of ``sg`` inside ``region``."""
    g = sg.graph
    if factor == 1.0 or not region.intervals:
        return {}
    keys = np.array([g.keys.index(k) for k in HOST_KEYS if k in g.keys])
    host = np.isin(g.comp_key, keys) & (g.comp_edge < g.n_points)
    out: dict[int, float] = {}
    for c, name in enumerate(g.chain_name):
        m = _THREAD.match(name)
        iv = region.intervals.get(int(m.group(1))) if m else None
        if iv is None or not len(iv):
            continue
        lo, hi = int(g.chain_start[c]), int(g.chain_start[c + 1])
        if hi - lo < 2:
            continue
        t = g.time[lo:hi]
        span = np.diff(t)
        share = np.zeros(len(span))
        pos = span > 0
        share[pos] = covered(iv, t[:-1][pos], t[1:][pos]) / span[pos]
        comps = np.flatnonzero(host & (g.comp_edge > lo) & (g.comp_edge < hi))
        s = share[g.comp_edge[comps] - lo - 1]
        hit = s > 0
        for ci, si in zip(comps[hit].tolist(), s[hit].tolist(), strict=True):
            out[ci] = 1.0 - si + si * factor
    return out


def step_weights(sg: B.StepGraph, effect: Effect) -> Weights:
    """The effect on one step's graph."""
    ids = sg.kernel_id
    mult = np.where(effect.removed[ids], 0.0, effect.kernel_mult[ids])
    merged = effect.merged[ids] | effect.removed[ids]
    comp: dict[int, float] = {}
    for i in np.flatnonzero((mult != 1.0) & (sg.kernel_comp >= 0)).tolist():
        comp[int(sg.kernel_comp[i])] = float(mult[i])
    gaps = sg.gap_comp[merged]
    comp.update((int(c), 0.0) for c in gaps[gaps >= 0].tolist())
    edges = sg.launch_edge[merged]
    w = Weights(comp_mult=comp, off=frozenset(int(e) for e in edges[edges >= 0].tolist()))
    for region, factor in effect.host:
        w = w.then(Weights(comp_mult=host_weights(sg, region, factor)))
    for sc in effect.also:
        w = w.then(sc.weights(sg))
    return w


def scenario(effect: Effect, name: str, description: str) -> CP.Scenario:
    return CP.Scenario(name, description, lambda sg: step_weights(sg, effect))


def predict_ratio(
    cp: CP.CriticalPath, effect: Effect, host_speedup: float, steps: Sequence[int] | None = None
) -> tuple[float, float]:
    """(baseline ms, lever ms) predicted for the run as it runs without the profiler: both
    with the host ``host_speedup`` times faster than traced (``calibrate_host``)."""
    h = CP.host_speedup(host_speedup)
    base = CP.predict(cp, h, steps)
    lever = CP.predict(cp, CP.then(h, scenario(effect, "lever", "")), steps)
    return base, lever

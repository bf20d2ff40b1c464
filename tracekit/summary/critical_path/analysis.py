"""The critical path of a training step, and what-if estimates on it (docs/critical-path.md).

:func:`analyse` builds each analysed step's dependency graph (:mod:`.build`), solves it as a
steady-state loop of identical steps (:mod:`.graph`) and reports: the path's length (the
predicted step time) against the traced step time, the time on the path per kernel class
and per kind of host or idle time, how much of each class's GPU time is *off* the path
(making it faster buys nothing), and the step time under what-ifs: a class's kernels k
times faster, launches free, CUDA graphs, a fusion.

For predictions from other code (``tracekit advise``): ``cp = analyse(trace, cls)``, then
``predict(cp, class_speedup("gemm", 2))``, ``predict(cp, fuse(("elementwise",)))``, ... or
any :class:`Scenario`; :func:`then` combines scenarios.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.critical_path.build as B
import tracekit.summary.critical_path.graph as G
import tracekit.summary.critical_path.tables as T
from tracekit.manifest import manifest_or_empty
from tracekit.summary.critical_path.graph import Weights

COPIES = 3  # steps solved in a row: the last one's period is the steady state
SPEEDUP = 2.0  # k of the report's per-class what-ifs
TOP_CLASSES = 6  # per-class what-ifs in the report: the classes with most GPU time
WHAT_IF_STEPS = 8  # what-ifs are solved on at most this many steps (evenly spaced)
FUSE_CLASSES = ("elementwise", "activation")
GROUPS = {
    **{k: "host" for k in T.HOST},
    T.LAUNCH: "launch",
    T.THREAD: "idle",
    T.GPU_IDLE: "idle",
    T.STREAM_WAIT: "idle",
    T.SYNC: "idle",
    T.UNEXPLAINED: "idle",
}


@dataclass(frozen=True)
class Scenario:
    """A what-if: ``weights(step_graph)`` re-weights one step's graph."""

    name: str
    description: str
    weights: Callable[[B.StepGraph], Weights]


def class_speedup(cls: str, k: float) -> Scenario:
    """The kernels of class ``cls`` run ``k`` times faster."""
    return Scenario(
        f"{cls}_x{k:g}",
        f"{cls} kernels {k:g}x faster",
        lambda sg: Weights(key_mult={cls: 1.0 / k}),
    )


def host_speedup(k: float) -> Scenario:
    """All host time (operators, runtime calls, untraced Python) ``k`` times faster; waits
    keep following the GPU and the other threads."""
    return Scenario(
        f"host_x{k:g}",
        f"host (CPU) work {k:g}x faster",
        lambda sg: Weights(key_mult={c: 1.0 / k for c in T.HOST if c not in T.WAITS}),
    )


def gpu_free() -> Scenario:
    """The GPU's side of the step costs nothing (kernels, launch latency, GPU idle, stream
    and sync waits, the launch queue): what is left is the host's own path through the
    step — what the host-issue probe of ``tracekit collect`` times without the profiler."""
    gpu_side = (T.LAUNCH, T.GPU_IDLE, T.STREAM_WAIT, T.SYNC, T.QUEUE)

    def w(sg: B.StepGraph) -> Weights:
        host = {*T.HOST, T.THREAD, T.UNEXPLAINED}
        return Weights(key_mult={k: 0.0 for k in (*sg.graph.keys, *gpu_side) if k not in host})

    return Scenario("gpu_free", "the GPU's work and waits cost nothing", w)


def launch_free() -> Scenario:
    """Launch calls cost no CPU time (the GPU-side launch latency stays)."""
    return Scenario(
        "launch_free",
        "kernel launch calls cost no CPU time",
        lambda sg: Weights(key_mult={T.CPU_LAUNCH: 0.0}),
    )


def cuda_graphs() -> Scenario:
    """The step replayed as one CUDA graph: no host time in the step (operators, runtime,
    untraced), no launch latency or thread handoff, and no gap between queued kernels
    longer than ``G0`` (the trace's back-to-back gap). Syncs still wait for the GPU."""

    def w(sg: B.StepGraph) -> Weights:
        zero = {c: 0.0 for c in (*T.HOST, T.LAUNCH, T.THREAD)}
        return Weights(key_mult=zero, key_cap={T.GPU_IDLE: float(sg.g0)})

    return Scenario("cuda_graphs", "the step as one CUDA graph (no host work, no launches)", w)


def fuse(classes: Sequence[str] = FUSE_CLASSES, model: str = "traffic") -> Scenario:
    """Each run of >= 2 consecutive kernels of ``classes`` on a stream becomes one kernel:
    the later kernels' launch calls (their CPU time), launch edges and the gaps inside the
    run disappear. ``model="gaps"``: the fused kernel takes the sum of the durations;
    ``"traffic"``: minus the time each kernel spent writing its output for the next one
    and reading its input from the previous one (docs/critical-path.md)."""
    if model not in ("gaps", "traffic"):
        raise ValueError(f"fusion model {model!r}: 'gaps' or 'traffic'")
    cset = tuple(classes)

    def w(sg: B.StepGraph) -> Weights:
        comp: dict[int, float] = {}
        off: set[int] = set()
        for run in fusion_groups(sg, cset):
            later = run[1:]
            for c in np.r_[sg.launch_comp[later], sg.gap_comp[later]].tolist():
                if c >= 0:
                    comp[c] = 0.0
            off.update(e for e in sg.launch_edge[later].tolist() if e >= 0)
            if model == "traffic":
                links = np.full(len(run), 2.0)
                links[[0, -1]] = 1.0
                mult = np.clip(1.0 - links / (sg.kernel_inputs[run] + 1.0), 0.0, 1.0)
                for c, m in zip(sg.kernel_comp[run].tolist(), mult.tolist(), strict=True):
                    comp[c] = m
        return Weights(comp_mult=comp, off=frozenset(off))

    label = "+".join(cset)
    return Scenario(f"fuse_{label}", f"runs of {label} kernels fused ({model} model)", w)


def then(*scenarios: Scenario) -> Scenario:
    """All of ``scenarios`` at once."""

    def w(sg: B.StepGraph) -> Weights:
        out = Weights()
        for s in scenarios:
            out = out.then(s.weights(sg))
        return out

    return Scenario(
        "+".join(s.name for s in scenarios), "; ".join(s.description for s in scenarios), w
    )


def fusion_groups(sg: B.StepGraph, classes: Iterable[str]) -> list[np.ndarray]:
    """Runs of >= 2 consecutive kernels of ``classes`` on one stream (positions in the
    step's kernel arrays, stream order)."""
    member = np.isin(sg.kernel_class.astype(str), list(classes))
    out: list[np.ndarray] = []
    for ln in np.unique(sg.kernel_lane).tolist():
        pos = np.flatnonzero(sg.kernel_lane == ln)  # stream order: kernels are in ts order
        m = member[pos]
        edges = np.diff(np.r_[0, m.astype(np.int8), 0])
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
            if b - a >= 2:
                out.append(pos[a:b])
    return out


def default_scenarios(gpu_ns: dict[str, float], k: float = SPEEDUP) -> list[Scenario]:
    """The report's what-ifs: each of the :data:`TOP_CLASSES` classes with most GPU time
    ``k`` times faster, launches free, host work ``k`` times faster, CUDA graphs, and the
    elementwise and activation kernels fused."""
    top = sorted((c for c, v in gpu_ns.items() if v > 0), key=lambda c: -gpu_ns[c])
    out = [class_speedup(c, k) for c in top[:TOP_CLASSES]]
    return [*out, launch_free(), host_speedup(k), cuda_graphs(), fuse(FUSE_CLASSES)]


@dataclass
class StepSolution:
    """One step solved as a steady-state loop: its period and the path's time per key."""

    step: int
    period_ns: int
    on_path_ns: np.ndarray  # per graph key, over one period
    change_pct: float  # period change between the last two copies (convergence)


def solve_step(
    sg: B.StepGraph, scenario: Scenario | None = None, copies: int = COPIES, path: bool = True
) -> StepSolution:
    """Solve one step's graph (optionally under a what-if) as ``copies`` steps in a row;
    ``path``: also attribute the critical path's time (else only the period)."""
    what = scenario.weights(sg) if scenario is not None else None
    n = 1 if sg.whole_trace else copies
    per = G.periods(sg.graph, what, copies=n)
    if path:
        cyc = G.cycle(sg.graph, per)
        on = G.attribute(sg.graph, what, cyc.edges, cyc.frac)
        p, change = cyc.period, cyc.change
    else:
        p, _, change = G.period(sg.graph, per)
        on = np.zeros(len(sg.graph.keys))
    return StepSolution(sg.step, int(p), on, 100.0 * abs(change) / p if p else 0.0)


@dataclass
class Summary:
    """The headline figures (means over the analysed steps, ms)."""

    path_ms: float  # predicted steady-state step time (the critical path's length)
    step_ms: float  # traced step time, max(CPU span, GPU span)
    path_vs_step_pct: float  # 100 * (path - step) / step
    gpu_ms: float  # on the path: kernels, memcpy, memset
    host_ms: float  # on the path: CPU work (operators, runtime calls, untraced, waits)
    launch_ms: float  # on the path: launch latency
    idle_ms: float  # on the path: GPU gaps, thread handoffs, sync and stream waits
    bound: str  # 'gpu', 'host' or 'mixed' (>= 80 % of the path in one)


@dataclass
class CriticalPath:
    """The result of :func:`analyse` (frames documented in docs/critical-path.md)."""

    steps: list[int]
    graphs: list[B.StepGraph]
    per_step: pd.DataFrame
    on_path: pd.DataFrame
    what_if: pd.DataFrame
    summary: Summary
    copies: int
    what_if_steps: list[int]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    measured_ms: float | None = None  # the run's step time without the profiler (manifest)
    host_speedup: float | None = None  # calibrate_host(measured_ms)
    scenarios: list[Scenario] = field(default_factory=list)  # the what-ifs solved


def kernel_classes(trace: Any, cls: Any) -> np.ndarray | None:
    """The class of each row of ``trace.kernels`` from a ``Classification``."""
    if cls is None or not hasattr(cls, "kernels") or "class" not in cls.kernels:
        return None
    out = trace.kernels["kind"].to_numpy(dtype=object).copy()
    ids = cls.kernels["kernel_id"].to_numpy(np.int64)
    ok = (ids >= 0) & (ids < len(out))
    out[ids[ok]] = cls.kernels["class"].to_numpy(dtype=object)[ok]
    return np.asarray(out, object)


def analyse(
    trace: Any,
    cls: Any = None,
    *,
    steps: Sequence[int] | None = None,
    copies: int = COPIES,
    scenarios: Sequence[Scenario] | None = None,
) -> CriticalPath:
    """The critical path of every analysed step of ``trace`` (a ``tracekit.parse.Trace``;
    ``cls``: its ``Classification``, for kernel classes; without it, kinds), and the
    what-ifs (default: :func:`default_scenarios`) on up to :data:`WHAT_IF_STEPS` steps."""
    t0 = time.perf_counter()
    P = T.prepare(trace, kernel_classes(trace, cls))
    all_steps = [int(s) for s in P.steps["step"]]
    todo = [s for s in (steps if steps is not None else all_steps) if s in all_steps]
    keys = T.step_keys(P)
    graphs = [B.build_step(P, s, keys) for s in todo]
    sols = [solve_step(sg, None, copies) for sg in graphs]
    per_step = _per_step(graphs, sols)
    gpu = _gpu_ns(graphs, keys)
    on_path = _on_path(keys, sols, gpu, max(1, len(graphs)))
    sample = _sample(len(graphs))
    if scenarios is None:
        scenarios = default_scenarios({k: gpu[i] for i, k in enumerate(keys) if gpu[i] > 0})
    what_if = _what_ifs(graphs, sols, sample, scenarios, copies)
    cp = CriticalPath(
        steps=todo,
        graphs=graphs,
        per_step=per_step,
        on_path=on_path,
        what_if=what_if,
        summary=_summary(per_step, on_path),
        copies=1 if P.whole_trace else copies,
        what_if_steps=[todo[i] for i in sample],
        scenarios=list(scenarios),
    )
    if P.whole_trace:
        cp.notes.append(
            "no ProfilerStep markers: the whole trace is one step, solved once (no "
            "steady-state loop)"
        )
    cp.seconds = time.perf_counter() - t0
    return cp


def predict(cp: CriticalPath, scenario: Scenario, steps: Sequence[int] | None = None) -> float:
    """Mean predicted step time (ms) under ``scenario`` over ``steps`` (default: the
    what-if sample of :func:`analyse`)."""
    want = set(steps if steps is not None else cp.what_if_steps)
    sel = [sg for sg in cp.graphs if sg.step in want]
    if not sel:
        return float("nan")
    per = [solve_step(sg, scenario, cp.copies, path=False).period_ns for sg in sel]
    return float(np.mean(per) / 1e6)


def calibrate_host(
    cp: CriticalPath, measured_ms: float, rel_tol: float = 5e-3, given: Scenario | None = None
) -> float | None:
    """The host speed-up k for which the predicted step time equals ``measured_ms``, a step
    time measured without the profiler (whose own per-operator cost inflates the traced
    host time; ``tracekit collect`` records it in the manifest). 1.0 when the traced path
    is not longer than the measurement; None when even a free host predicts more than it
    (then the host is not what the profiler slowed down). ``then(host_speedup(k), s)``
    predicts scenario ``s`` for the unprofiled run. ``given``: a scenario the measurement
    was made under (:func:`gpu_free` for the host's own time per step)."""

    def at(k: float) -> float:
        s = host_speedup(k)
        return predict(cp, s if given is None else then(given, s))

    base = at(1.0)
    if not measured_ms > 0 or base != base:
        return None
    if measured_ms >= base:
        return 1.0
    if at(1e6) > measured_ms * (1 + rel_tol):
        return None
    lo, hi = 1.0, 2.0
    while at(hi) > measured_ms and hi < 1e6:
        lo, hi = hi, hi * 2
    if at(hi) > measured_ms:
        # within rel_tol above a free host's time but not reached by any finite speed-up:
        # the GPU's path binds; no host speed-up describes the step (was read as x2**20)
        return None
    while hi / lo > 1 + rel_tol:  # the step time falls monotonically with k
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if at(mid) > measured_ms else (lo, mid)
    return hi


def _sample(n: int, most: int = WHAT_IF_STEPS) -> list[int]:
    """At most ``most`` of ``range(n)``, evenly spaced."""
    if n <= most:
        return list(range(n))
    return sorted({round(float(x)) for x in np.linspace(0, n - 1, most)})


def _per_step(graphs: list[B.StepGraph], sols: list[StepSolution]) -> pd.DataFrame:
    rows = []
    for sg, so in zip(graphs, sols, strict=True):
        r = G.replay(sg.graph)
        ok = r > G._LOW
        exact = 100.0 * float((r[ok] == sg.graph.time[ok]).sum()) / max(1, int(ok.sum()))
        rows.append(
            {
                "step": sg.step,
                "traced_ms": sg.traced_ns / 1e6,
                "cpu_ms": sg.cpu_ns / 1e6,
                "gpu_span_ms": sg.gpu_ns / 1e6,
                "path_ms": so.period_ns / 1e6,
                "path_vs_traced_pct": 100.0 * (so.period_ns - sg.traced_ns) / sg.traced_ns
                if sg.traced_ns
                else float("nan"),
                "replay_exact_pct": exact,
                "converged_pct": so.change_pct,
                "points": sg.graph.n_points,
                "edges": sg.graph.n_edges,
            }
        )
    out: pd.DataFrame = pd.DataFrame(rows)
    return out


def _gpu_ns(graphs: list[B.StepGraph], keys: list[str]) -> np.ndarray:
    """GPU time per key (kernel classes), summed over the steps."""
    out = np.zeros(len(keys))
    idx = {k: i for i, k in enumerate(keys)}
    for sg in graphs:
        for c, d in pd.Series(sg.kernel_dur).groupby(sg.kernel_class.astype(str)).sum().items():
            out[idx[str(c)]] += float(d)
    return out


def _on_path(keys: list[str], sols: list[StepSolution], gpu: np.ndarray, n: int) -> pd.DataFrame:
    """Per key: mean ms on the path per step, share of the path, GPU ms per step and the
    share of it off the path (kernel classes)."""
    on = np.sum([s.on_path_ns for s in sols], axis=0) if sols else np.zeros(len(keys))
    total = float(on.sum())
    rows = []
    for i, k in enumerate(keys):
        if on[i] == 0 and gpu[i] == 0:
            continue
        is_cls = k not in T.CATEGORIES
        rows.append(
            {
                "key": k,
                "group": "gpu" if is_cls else GROUPS[k],
                "on_path_ms": on[i] / n / 1e6,
                "on_path_pct": 100.0 * on[i] / total if total else float("nan"),
                "gpu_ms": gpu[i] / n / 1e6 if is_cls else float("nan"),
                "off_path_pct": float(np.clip(100.0 * (1 - on[i] / gpu[i]), 0, 100))
                if is_cls and gpu[i] > 0
                else float("nan"),
            }
        )
    df = pd.DataFrame(
        rows, columns=["key", "group", "on_path_ms", "on_path_pct", "gpu_ms", "off_path_pct"]
    )
    order = {"gpu": 0, "host": 1, "launch": 2, "idle": 3}
    df["_g"] = df["group"].map(order)
    out: pd.DataFrame = (
        df.sort_values(["_g", "on_path_ms", "gpu_ms"], ascending=[True, False, False])
        .drop(columns="_g")
        .reset_index(drop=True)
    )
    return out


def _what_ifs(
    graphs: list[B.StepGraph],
    sols: list[StepSolution],
    sample: list[int],
    scenarios: Sequence[Scenario],
    copies: int,
) -> pd.DataFrame:
    base = float(np.mean([sols[i].period_ns for i in sample])) / 1e6 if sample else float("nan")
    rows = []
    for sc in scenarios:
        ms = [solve_step(graphs[i], sc, copies, path=False).period_ns / 1e6 for i in sample]
        p = float(np.mean(ms)) if ms else float("nan")
        d = round(p - base, 6)  # ns: the rest is float noise
        rows.append(
            {
                "scenario": sc.name,
                "description": sc.description,
                "path_ms": p,
                "delta_ms": d,
                "delta_pct": 100.0 * d / base if base else float("nan"),
                "speedup": base / p if p else float("nan"),
            }
        )
    out: pd.DataFrame = pd.DataFrame(
        rows, columns=["scenario", "description", "path_ms", "delta_ms", "delta_pct", "speedup"]
    )
    return out


def _summary(per_step: pd.DataFrame, on_path: pd.DataFrame) -> Summary:
    g = on_path.groupby("group")["on_path_ms"].sum()
    path = float(per_step["path_ms"].mean()) if len(per_step) else float("nan")
    step = float(per_step["traced_ms"].mean()) if len(per_step) else float("nan")
    gpu, host = float(g.get("gpu", 0.0)), float(g.get("host", 0.0))
    bound = "gpu" if gpu >= 0.8 * path else "host" if host >= 0.8 * path else "mixed"
    return Summary(
        path_ms=path,
        step_ms=step,
        path_vs_step_pct=100.0 * (path - step) / step if step else float("nan"),
        gpu_ms=gpu,
        host_ms=host,
        launch_ms=float(g.get("launch", 0.0)),
        idle_ms=float(g.get("idle", 0.0)),
        bound=bound,
    )


def summary_block(cp: CriticalPath | None) -> dict[str, Any] | None:
    """The ``critical_path`` block of ``summary.json`` (docs/report.md)."""
    if cp is None or not cp.steps:
        return None
    s = cp.summary
    op = cp.on_path
    cls = op[op["group"] == "gpu"]
    sg = cp.graphs[0]
    doc: dict[str, Any] = {
        "steps": cp.steps,
        "copies": cp.copies,
        "path_ms": s.path_ms,
        "step_ms": s.step_ms,
        "path_vs_step_pct": s.path_vs_step_pct,
        "path_ms_per_step": {str(r.step): r.path_ms for r in cp.per_step.itertuples()},
        "replay_exact_pct": float(cp.per_step["replay_exact_pct"].min()),
        "bound": s.bound,
        "groups_ms": {"gpu": s.gpu_ms, "host": s.host_ms, "launch": s.launch_ms, "idle": s.idle_ms},
        "on_path_ms": {r.key: r.on_path_ms for r in op.itertuples()},
        "on_path_pct": {r.key: r.on_path_pct for r in op.itertuples()},
        "off_path_pct": {r.key: r.off_path_pct for r in cls.itertuples()},
        "what_if": {
            r.scenario: {"path_ms": r.path_ms, "delta_pct": r.delta_pct, "speedup": r.speedup}
            for r in cp.what_if.itertuples()
        },
        "what_if_steps": cp.what_if_steps,
        "model": {"launch_latency_us": sg.l0 / 1e3, "queued_kernel_gap_us": sg.g0 / 1e3},
        "unprofiled": {"measured_step_ms": cp.measured_ms, "host_speedup": cp.host_speedup},
        "notes": cp.notes,
    }
    out: dict[str, Any] = json.loads(json.dumps(doc, default=float))
    return out


REPORT_STEPS = 8  # steps the report analyses (evenly spaced over the analysed steps)


def for_report(trace: Any, cls: Any, steps: Sequence[int]) -> CriticalPath | None:
    """The report's analysis: at most :data:`REPORT_STEPS` of ``steps`` (evenly spaced),
    None for a trace without GPU activity in them."""
    if not len(trace.kernels) or not steps:
        return None
    pick = [list(steps)[i] for i in _sample(len(steps), REPORT_STEPS)]
    cp = analyse(trace, cls, steps=pick)
    man = getattr(trace, "manifest", None)
    measured = manifest_or_empty(man if isinstance(man, dict) else None).metrics.step_median_ms
    if measured is not None and cp.steps:
        cp.measured_ms = measured
        cp.host_speedup = calibrate_host(cp, measured)
    if len(pick) < len(steps):
        cp.notes.append(
            f"critical path: {len(pick)} of the {len(steps)} analysed steps, evenly spaced"
        )
    return cp if cp.steps else None

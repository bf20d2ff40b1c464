"""A faithful timeline: the light pass's steps joined to the full pass's, kernel by kernel.

``tracekit collect`` records each step twice (``collectors/passes.py``): a light pass with
CUDA activity only, whose step is close to the unprofiled one, then the full pass (shapes,
memory, FLOPs), whose host side the profiler stretches. Kernel durations survive the
profiler; idle time, launch gaps and overlap do not. So the report takes

* from the **light** pass: the step table (step time, GPU span and busy time), GPU idle,
  the launch check (kernels per step, launch calls) and the verdict's overlap figure
  (exposed communication);
* from the **full** pass: classes, FLOPs, bytes, the roofline, per-class durations,
  memory, input spans (they need CPU operators) and the critical path (its host graph is
  built from CPU operators, which the light pass does not record).

**Join.** The k-th light step pairs with the k-th analysed full step (both passes run the
same schedule of the same step function; extra steps on either side are left out, with a
note). The light pass's GPU activities of the paired steps join the full pass's **per
stream, by order and key** (``tracekit.summary.timeline_join``): on each stream, in start
order, the kernel's name with its grid and block (memcpy/memset: their name), never by
correlation id (the passes are two profiler sessions), the step markers left out. The
**join rate** is the share of both passes' GPU time whose activity found its partner; below
:data:`MIN_JOINED_PCT` % the passes ran different work: the report falls back to the full
pass and says why (``--timeline light`` makes that an error instead). A light activity
carries the class of its full partner (one without a partner is classed by its own name),
so the overlap of communication with other work is measured on the light timeline with the
full pass's classes.

The light pass is recorded by CUPTI, kernels only (``cupti-kernels``:
``collectors/cupti_pass.py``), or by Kineto with CUDA activity (``kineto-cuda``, the
fallback); :attr:`Timeline.recorder` says which (the manifest's
``profiler.timeline.recorder``, else the trace: a kernels-only one has no launch calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.classify.classes import classify_kernel_name
from tracekit.errors import TracekitError, UsageError
from tracekit.manifest import RunManifest, manifest_or_empty
from tracekit.parse import load
from tracekit.parse.timeline import is_marker, with_light_steps
from tracekit.summary.steps import step_table
from tracekit.summary.timeline_join import join_streams

MODES = ("auto", "light", "full")
MIN_JOINED_PCT = 99.0  # below this share of GPU time joined the light pass is not used
FAITHFUL_PCT = 10.0  # a timeline step further than this from the unprofiled one is flagged
# the light pass's steps timed apart agree with its interleaved cost within its IQR and this
APART_SLACK_PCT = 3.0
KERNEL_COLUMNS = ("step", "kind", "name", "ts", "dur", "runtime_id")
LIGHT = "light"
FULL = "full"
CUPTI = "cupti-kernels"  # the light pass's recorders (collectors/cupti_pass.py)
KINETO = "kineto-cuda"
RECORDERS = (CUPTI, KINETO)
RECORDER_WORDS = {CUPTI: "CUPTI, kernels only", KINETO: "Kineto, CUDA only"}


@dataclass
class Timeline:
    """Which pass the timeline figures come from, and the light pass joined to the full.

    ``source``: ``light`` or ``full``; ``reason``: why ``full`` (None when light).
    ``kernels``/``runtime``/``steps``: the light pass's GPU activities, runtime calls and
    steps table (parser columns), renumbered with the full pass's step numbers (empty
    without a light pass); ``kernels`` also holds ``full_kernel_id`` (-1: unmatched),
    ``matched`` and ``marker``. ``per_step``: ``step``, ``light_step``,
    ``light_kernels``, ``full_kernels``, ``matched``, ``matched_pct``, ``joined_pct``
    (GPU time)."""

    source: str
    requested: str  # auto | light | full
    reason: str | None = None
    brief: str | None = None  # the reason in a few words (the terminal's header line)
    path: str | None = None
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    runtime: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    per_step: pd.DataFrame = field(default_factory=pd.DataFrame)
    matched_pct: float | None = None  # share of the activities joined
    joined_pct: float | None = None  # share of the two passes' GPU time joined
    step_source: str | None = None  # marker kernels | host step starts
    recorder: str | None = None  # cupti-kernels | kineto-cuda
    notes: list[str] = field(default_factory=list)

    @property
    def light(self) -> bool:
        return self.source == LIGHT


def _step_rows(
    steps: list[int], l_step: np.ndarray, f_step: np.ndarray, l_sel: np.ndarray,
    f_sel: np.ndarray, partner: np.ndarray, f_joined: np.ndarray, l_dur: np.ndarray,
    f_dur: np.ndarray,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per paired step: its activities in each pass, how many joined, the joined share of
    the step's GPU time (both passes)."""
    rows = []
    for k, s in enumerate(steps):
        li, fi = np.flatnonzero(l_sel & (l_step == k)), np.flatnonzero(f_sel & (f_step == s))
        ok_l, ok_f = partner[li] >= 0, f_joined[fi]
        total = int(l_dur[li].sum()) + int(f_dur[fi].sum())
        got = int(l_dur[li][ok_l].sum()) + int(f_dur[fi][ok_f].sum())
        big = max(len(li), len(fi))
        rows.append({
            "step": int(s), "light_step": k, "light_kernels": len(li), "full_kernels": len(fi),
            "matched": int(ok_l.sum()),
            "matched_pct": 100.0 * int(ok_l.sum()) / big if big else 100.0,
            "joined_pct": 100.0 * got / total if total else 100.0,
        })  # fmt: skip
    return rows


def mismatch(joined_pct: float | None, per_step: pd.DataFrame, key: str,
             worst: str | None) -> str | None:  # fmt: skip
    """Why the light pass cannot stand for the full one (None: it can)."""
    if not len(per_step):
        return "the light pass has no step to pair with the full pass's"
    if joined_pct is None or joined_pct < MIN_JOINED_PCT:
        pct = f"{joined_pct:.1f}" if joined_pct is not None else "no"
        where = f"; most of the rest on {worst}" if worst else ""
        return (
            f"only {pct} % of the GPU time joins the full pass's kernels (per stream, by order "
            f"and {key}; < {MIN_JOINED_PCT:.0f} %{where}): the passes ran different work"
        )
    return None


def _recorder(light: Any, manifest: RunManifest) -> str:
    """Which recorder made the light trace: the manifest's ``profiler.timeline``, else the
    trace itself (a kernels-only trace has no launch calls)."""
    tl = (manifest.profiler or {}).get("timeline")
    if isinstance(tl, dict) and tl.get("recorder") in RECORDERS:
        return str(tl["recorder"])
    return CUPTI if not len(light.runtime) and len(light.kernels) else KINETO


def join(light: Any, full: Any, steps: list[int]) -> Timeline:
    """Join a light trace (with its steps: ``tracekit.parse.timeline.with_light_steps``)
    to the full trace's analysed ``steps`` (see the module docstring)."""
    lk, fk = light.kernels, full.kernels
    n = min(len(light.steps), len(steps))
    l_mark = lk["marker"].to_numpy(dtype=bool) if "marker" in lk else is_marker(lk["name"])
    f_mark = is_marker(fk["name"])
    l_step, f_step = lk["step"].to_numpy(), fk["step"].to_numpy()
    l_sel = ~l_mark & (l_step >= 0) & (l_step < n)
    f_sel = ~f_mark & np.isin(f_step, steps[:n])
    j = join_streams(lk, np.flatnonzero(l_sel), fk, np.flatnonzero(f_sel))
    f_id = fk["kernel_id"].to_numpy(dtype=np.int64)
    partner = np.where(j.partner >= 0, f_id[np.maximum(j.partner, 0)], -1)
    l_dur, f_dur = lk["dur"].to_numpy(dtype=np.int64), fk["dur"].to_numpy(dtype=np.int64)
    per_step = pd.DataFrame(
        _step_rows(steps[:n], l_step, f_step, l_sel, f_sel, j.partner, j.full_joined, l_dur, f_dur)
    )
    why = mismatch(j.joined_pct, per_step, j.key, j.worst)
    new_step = np.full(len(lk), -1, dtype=np.int64)
    for k, s in enumerate(steps[:n]):
        new_step[l_step == k] = s
    matched = int(per_step["matched"].sum()) if n else 0
    total = int(per_step[["light_kernels", "full_kernels"]].max(axis=1).sum()) if n else 0
    kern = lk[[c for c in KERNEL_COLUMNS if c in lk]].assign(
        step=new_step.astype(np.int32), full_kernel_id=partner, matched=partner >= 0, marker=l_mark
    )
    notes = []
    if len(light.steps) != len(steps):
        notes.append(
            f"the light pass has {len(light.steps)} steps, the full pass {len(steps)}: "
            f"the first {n} of each are paired"
        )
    return Timeline(
        source=FULL if why else LIGHT,
        requested="auto",
        reason=why,
        brief="the passes ran different work" if why else None,
        path=str(light.path),
        kernels=kern[new_step >= 0],
        runtime=_renumber_runtime(light.runtime, steps[:n]),
        steps=_renumber_steps(light.steps, steps[:n]),
        per_step=per_step,
        matched_pct=100.0 * matched / max(1, total) if n else None,
        joined_pct=j.joined_pct if n else None,
        step_source=(light.meta.get("timeline") or {}).get("source"),
        recorder=_recorder(light, _manifest(full)),
        notes=notes,
    )


def _renumber_runtime(rt: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    """The light runtime calls with the full pass's step numbers (-1: no paired step)."""
    if not len(rt):
        return rt
    remap = np.asarray([*steps, -1], dtype=np.int64)
    k = rt["step"].to_numpy(dtype=np.int64)
    k = np.where((k >= 0) & (k < len(steps)), k, len(steps))
    frame: pd.DataFrame = rt.assign(step=remap[k].astype(np.int32))
    return frame


def _renumber_steps(st: pd.DataFrame, steps: list[int]) -> pd.DataFrame:
    out: pd.DataFrame = st[st["step"] < len(steps)].copy()
    out["step"] = np.asarray(steps, dtype=np.int32)[out["step"].to_numpy()]
    return out


def with_classes(kernels: pd.DataFrame, classified: pd.DataFrame) -> pd.DataFrame:
    """The light activities with a ``class``: their full partner's (``classified``: the
    classify stage's kernels, ``kernel_id`` and ``class``), else by kernel name."""
    ids = classified["kernel_id"].to_numpy(dtype=np.int64)
    cls = classified["class"].astype(object).to_numpy()
    pos = pd.Index(ids).get_indexer(kernels["full_kernel_id"].to_numpy(dtype=np.int64))
    out = np.full(len(kernels), None, dtype=object)
    if len(cls):
        out[pos >= 0] = cls[pos[pos >= 0]]
    names, kinds = kernels["name"].astype(str).tolist(), kernels["kind"].astype(str).tolist()
    for i in np.flatnonzero(pos < 0):
        out[i] = classify_kernel_name(names[i], kinds[i])
    frame: pd.DataFrame = kernels.assign(**{"class": out})
    return frame


def _manifest(trace: Any) -> RunManifest:
    man = getattr(trace, "manifest", None)
    return manifest_or_empty(man if isinstance(man, dict) else None)


def _artifact(trace: Any, key: str) -> Path | None:
    rel = _manifest(trace).artifacts.get(key)
    run_dir = getattr(trace, "run_dir", None)
    if not rel or run_dir is None:
        return None
    return Path(run_dir) / str(rel)


def _absent(trace: Any) -> str:
    why = _manifest(trace).artifacts.get("timeline_trace_absent")
    if why:
        return f"no light timeline pass: {why}"
    if getattr(trace, "run_dir", None) is None:
        return "a bare trace has no light timeline pass (tracekit collect records one)"
    return "no light timeline pass (the run was collected without one)"


def for_report(trace: Any, steps: list[int], mode: str = "auto") -> Timeline:
    """The report's timeline: the run folder's light pass joined to ``trace`` (the full
    pass) where it exists and ``mode`` allows, else the full pass with the reason.
    ``mode``: ``auto``; ``light`` (an error when the light pass cannot be used); ``full``."""
    if mode not in MODES:
        raise UsageError(f"--timeline must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == FULL:
        why = "the full pass was asked for (--timeline full)"
        return Timeline(FULL, mode, reason=why, brief="--timeline full")
    path = _artifact(trace, "timeline_trace")
    if path is None or not path.is_file():
        why = _absent(trace) if path is None else f"{path}: the light trace is missing"
        if mode == LIGHT:
            raise UsageError(f"--timeline light: {why}")
        return Timeline(FULL, mode, reason=why, brief="no light pass")
    sidecar = _artifact(trace, "timeline_steps")
    try:
        light = with_light_steps(load(path), sidecar if sidecar and sidecar.is_file() else None)
    except TracekitError as e:
        if mode == LIGHT:
            raise UsageError(f"--timeline light: {e}") from None
        why = f"the light timeline pass is unreadable: {e}"
        return Timeline(FULL, mode, reason=why, brief="light pass unreadable")
    tl = join(light, trace, steps)
    tl.requested = mode
    if tl.reason and mode == LIGHT:
        raise UsageError(f"--timeline light: the light pass does not match the full: {tl.reason}")
    return tl


def _pct(a: float | None, b: float | None) -> float | None:
    return 100.0 * (a / b - 1.0) if a is not None and b else None


def _mean_step(table: pd.DataFrame | None) -> float | None:
    return float(table["step_time_ms"].mean()) if table is not None and len(table) else None


def _metric(manifest: Any, key: str) -> float | None:
    return manifest_or_empty(manifest if isinstance(manifest, dict) else None).metrics.number(key)


@dataclass(frozen=True)
class TimelineFacts:
    """What the report says about its timeline (``summary.json`` ``timeline``).

    Step times: ``*_step_time_ms`` from the traces (the mean analysed step, ``max`` of its
    CPU and GPU spans, as the step table has it); ``*_measured_step_time_ms`` by CUDA
    events while the pass ran (manifest). ``vs_unprofiled_pct`` and ``faithful`` are
    those of the pass the timeline figures come from, its trace step against the
    unprofiled median."""

    source: str
    requested: str
    reason: str | None
    brief: str | None
    light_trace: str | None
    step_markers: str | None
    matched_pct: float | None
    joined_pct: float | None  # share of the passes' GPU time joined
    recorder: str | None  # which recorder made the light pass
    light_step_time_ms: float | None
    light_measured_step_time_ms: float | None
    full_step_time_ms: float | None
    full_measured_step_time_ms: float | None
    unprofiled_step_time_ms: float | None
    per_step: list[dict[str, Any]]
    notes: list[str]
    # the light pass's cost measured in interleaved rounds (manifest metrics.timeline_cost)
    light_cost: dict[str, Any] | None = None

    @property
    def light_cost_pct(self) -> float | None:
        """The light pass's cost from the interleaved rounds, in % (None: not measured)."""
        c = self.light_cost
        return float(c["pct"]) if c and isinstance(c.get("pct"), (int, float)) else None

    @property
    def light_vs_unprofiled_pct(self) -> float | None:
        return _pct(self.light_step_time_ms, self.unprofiled_step_time_ms)

    @property
    def full_vs_unprofiled_pct(self) -> float | None:
        return _pct(self.full_step_time_ms, self.unprofiled_step_time_ms)

    @property
    def step_time_ms(self) -> float | None:
        """The step time of the pass the timeline comes from."""
        return self.light_step_time_ms if self.source == LIGHT else self.full_step_time_ms

    @property
    def vs_unprofiled_pct(self) -> float | None:
        return _pct(self.step_time_ms, self.unprofiled_step_time_ms)

    @property
    def faithful(self) -> bool | None:
        """Within FAITHFUL_PCT of the unprofiled step: the light pass by its interleaved
        cost where measured (its window against steps timed apart carries the host's
        drift), else by its step against the unprofiled one."""
        cost = self.light_cost_pct if self.source == LIGHT else None
        v = cost if cost is not None else self.vs_unprofiled_pct
        return None if v is None else abs(v) <= FAITHFUL_PCT

    @property
    def apart_agrees(self) -> bool | None:
        """Whether the light pass's steps, timed apart from the unprofiled ones, sit where
        its interleaved cost puts them: their ratio within the rounds' IQR (stretched to
        include 1) widened by :data:`APART_SLACK_PCT` (None: nothing to compare)."""
        c, v = self.light_cost, self.light_vs_unprofiled_pct
        if self.source != LIGHT or c is None or v is None:
            return None
        lo, hi = (float(x) for x in c["iqr"])
        slack = APART_SLACK_PCT / 100
        return min(lo, 1.0) * (1 - slack) <= 1 + v / 100 <= max(hi, 1.0) * (1 + slack)

    def apart_note(self) -> str | None:
        """Where the light pass's steps and the unprofiled ones disagree by more than its
        cost: the two figures and why both hold (the host's speed between windows seconds
        apart, which the cost rounds' own unprofiled windows show)."""
        if self.apart_agrees is not False:
            return None
        c, v = self.light_cost, self.light_vs_unprofiled_pct
        assert c is not None and v is not None
        lo, hi = c["iqr"]
        u = [float(x) for x in c.get("unprofiled_ms") or [] if isinstance(x, (int, float))]
        seen = (
            f"; the unprofiled windows of those rounds ran {min(u):.2f}-{max(u):.2f} ms"
            if len(u) >= 2
            else ""
        )
        return (
            f"the light pass's steps ({self.light_step_time_ms:.2f} ms) ran {v:+.1f} % against "
            f"the unprofiled steps timed apart ({self.unprofiled_step_time_ms:.2f} ms), outside "
            f"its cost x{c['ratio']:.3f} (IQR {lo:.3f}-{hi:.3f}) measured in {c['rounds']} "
            "interleaved rounds: the rest is the host's speed in the light pass's window, not "
            f"the recorder's cost{seen}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "requested": self.requested,
            "reason": self.reason,
            "light_trace": self.light_trace,
            "step_markers": self.step_markers,
            "recorder": self.recorder,
            "matched_pct": self.matched_pct,
            "joined_pct": self.joined_pct,
            "min_joined_pct": MIN_JOINED_PCT,
            "step_time_ms": self.step_time_ms,
            "light_step_time_ms": self.light_step_time_ms,
            "light_measured_step_time_ms": self.light_measured_step_time_ms,
            "full_step_time_ms": self.full_step_time_ms,
            "full_measured_step_time_ms": self.full_measured_step_time_ms,
            "unprofiled_step_time_ms": self.unprofiled_step_time_ms,
            "vs_unprofiled_pct": self.vs_unprofiled_pct,
            "light_vs_unprofiled_pct": self.light_vs_unprofiled_pct,
            "full_vs_unprofiled_pct": self.full_vs_unprofiled_pct,
            "faithful": self.faithful,
            "faithful_pct": FAITHFUL_PCT,
            "light_cost": self.light_cost,
            "light_cost_pct": self.light_cost_pct,
            "apart_agrees": self.apart_agrees,
            "per_step": self.per_step,
            "notes": self.notes,
        }

    def warning(self) -> str | None:
        """The report's warning when the light timeline is not within FAITHFUL_PCT of the
        unprofiled step (the full pass's distance is today's, said on the timeline line)."""
        v = self.vs_unprofiled_pct
        if self.source != LIGHT or self.faithful is not False or v is None:
            return None
        if (c := self.light_cost) is not None and self.light_cost_pct is not None:
            lo, hi = c["iqr"]
            return (
                f"the light timeline pass costs the step x{c['ratio']:.3f} (IQR {lo:.3f}-"
                f"{hi:.3f}, {c['rounds']} interleaved rounds; target within "
                f"{FAITHFUL_PCT:.0f} %): its idle, launch and overlap figures carry that"
            )
        return (
            f"the light timeline pass's step ({self.light_step_time_ms:.2f} ms) is "
            f"{abs(v):.0f} % {'longer' if v > 0 else 'shorter'} than the unprofiled step "
            f"({self.unprofiled_step_time_ms:.2f} ms; target within {FAITHFUL_PCT:.0f} %): its "
            "idle, launch and overlap figures still carry profiler overhead, or the unprofiled "
            "steps ran differently"
        )


def timeline_facts(
    tl: Timeline, full_table: pd.DataFrame, unprofiled_ms: float | None, manifest: Any
) -> TimelineFacts:
    """The timeline block from the join and the full pass's step table
    (``tracekit.summary.steps.step_table``)."""
    light_table = step_table(tl.steps) if len(tl.steps) else None
    facts = TimelineFacts(
        source=tl.source,
        requested=tl.requested,
        reason=tl.reason,
        brief=tl.brief,
        light_trace=tl.path,
        step_markers=tl.step_source,
        matched_pct=tl.matched_pct,
        joined_pct=tl.joined_pct,
        recorder=tl.recorder,
        light_step_time_ms=_mean_step(light_table),
        light_measured_step_time_ms=_metric(manifest, "timeline_step_time_ms"),
        full_step_time_ms=_mean_step(full_table),
        full_measured_step_time_ms=_metric(manifest, "profiled_step_time_ms"),
        unprofiled_step_time_ms=unprofiled_ms,
        per_step=[{str(k): v for k, v in r.items()} for r in tl.per_step.to_dict("records")],
        notes=list(tl.notes),
        light_cost=_cost(manifest),
    )
    note = facts.apart_note()
    return replace(facts, notes=[*facts.notes, note]) if note else facts


def _cost(manifest: Any) -> dict[str, Any] | None:
    """The manifest's ``metrics.timeline_cost`` where it has its figures."""
    c = manifest_or_empty(manifest if isinstance(manifest, dict) else None).metrics.timeline_cost
    keys = ("ratio", "pct", "iqr", "rounds")
    return dict(c) if isinstance(c, dict) and all(k in c for k in keys) else None

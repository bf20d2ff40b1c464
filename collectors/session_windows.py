"""The schedule of a session over step ends, and its profiled windows (``tracekit run``,
``tracekit.profile()``).

:class:`Phases` counts the schedule: warm-up, timed, the **light timeline pass** (CUDA
only, unless ``timeline_pass`` is off: ``--single-pass``), the **full pass**, the
**category step** (when :func:`tracekit.collectors.passes.category_pass_needed`), the
memory snapshot. Each phase begins at the end of the step before its first (the number of
steps completed then).

:class:`ProfiledWindows` runs ``collect``'s three profiled passes
(:mod:`tracekit.collectors.passes`) over the step ends the user's loop reports: each
:class:`Window` opens its profiler at the step end that starts its first step, steps it at
every step end after (``Profiler.step()``, between the step's two timing marks, as
``collect`` keeps it out of the timed call), and closes it at the end of its last step.
The light pass's :class:`~tracekit.collectors.passes.LightProfiler` launches its step
marker at the step end that opens each recorded step and one more at the end of the last;
the full pass's :class:`~tracekit.collectors.passes.MarkedProfiler` launches the same
markers (only when the light pass runs), so both passes run the same launch sequence and
``tracekit report`` joins them step by step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import tracekit.collectors.observer as observer
from tracekit.collectors.cupti_pass import TimelinePass
from tracekit.collectors.light_cost import CostPass, CostRounds, light_cost
from tracekit.collectors.observer import RESIDUAL_STEPS
from tracekit.collectors.passes import (
    CategoryProfiler,
    LightProfiler,
    MarkedProfiler,
    StepMarker,
    category_config,
    category_pass_needed,
)
from tracekit.collectors.profiler import Profiler, ProfilerConfig
from tracekit.errors import TracekitError, UsageError

LIGHT = "light timeline pass"
FULL = "profiled steps"
CATEGORY = "category step"
COST = "light pass's cost rounds"


FIT_WARMUP = 3  # a fitted schedule's warm-up: its first steps compile, autotune, allocate
FIT_TIMED = 5  # a fitted schedule's steps timed before any pass
RESIDUAL = "residual check"
# The options that lower a schedule's minimum: (key, tracekit run's flag, profile()'s keyword)
LOWER = (
    ("timed", "--warmup 1 --steps 1", "warmup=1 steps=1"),
    ("wait", "--profile-wait 0", "wait=0"),
    ("warmup", "--profile-warmup 0", "profile_warmup=0"),
    ("active", "--profile-active 1", "active=1"),
    ("repeat", "--profile-repeat 1", "repeat=1"),
    ("category", "--no-memory-timeline", "memory_timeline=False"),
    ("light", "--single-pass", "single_pass=True"),
    ("snapshot", "--no-memory-snapshot", "memory_snapshot=False"),
)


class Phases:
    """Step counts at which each phase begins (steps completed so far).

    The steps are timed first, before any profiler ran in the process: warm-up, the timed
    steps (fixed: ``steps``; fitted, ``fit``: :data:`FIT_TIMED`), the light pass, the full
    pass, the category step, the snapshot (fitted: over the category step's last step where
    there is one: the step is recorded for its memory alone); the loop must run them all
    (:attr:`minimum` = :attr:`complete_at`). Where the loop runs on: the **residual check**
    (:data:`~tracekit.collectors.observer.RESIDUAL_STEPS` unprofiled steps timed again
    after every pass, against the first timed steps), then, where the light pass ran, its
    cost rounds (``collectors/light_cost.py``) up to :attr:`done`; a loop that ends in them
    is complete without those figures. In a fitted schedule the probes run in the category
    step (else the full pass) when the warm-up has one step, so that neither the full
    pass's step times nor the timed steps carry them."""

    def __init__(
        self,
        warmup: int,
        steps: int,
        profiler: ProfilerConfig,
        snapshot_steps: int,
        *,
        light: bool,
        fit: bool = False,
    ) -> None:
        self.warmup, self.profiler, self.fit = warmup, profiler, fit
        self.steps = min(steps, FIT_TIMED) if fit else steps
        self.timed = warmup
        self.timed_end = self.timed + self.steps
        self.light = self.timed_end
        self.full = self.light + (profiler.steps if light else 0)
        self.category = self.full + profiler.steps
        cat = category_config(profiler).steps if category_pass_needed(profiler) else 0
        self.category_end = self.category + cat
        if fit and cat and snapshot_steps:  # the snapshot records the category step's last
            self.snapshot_end = max(self.category_end, self.category + snapshot_steps)
        else:
            self.snapshot_end = self.category_end + snapshot_steps
        self.snapshot = self.snapshot_end - snapshot_steps
        # complete here; the residual check and the light pass's cost rounds follow where
        # the loop runs on
        self.complete_at = self.snapshot_end
        self.residual = self.complete_at
        self.residual_end = self.residual + RESIDUAL_STEPS
        self.cost = self.residual_end
        cost = CostRounds(profiler.light_cost_rounds).steps if light else 0
        self.done = self.cost_end = self.cost + cost
        self.minimum = self.complete_at
        # The probed steps (the model's input, average memory) follow step end probe_from
        # up to probe_to: the warm-up steps after the first, so that the timed steps run
        # without tracekit's hooks; with one warm-up step, the full pass's steps (fitted:
        # the category step's, when there is one), never the light pass's: its timeline
        # must be the unprofiled step's.
        probed: tuple[int, int] = (
            (1, warmup)
            if warmup >= 2
            else (self.category, self.category_end)
            if fit and cat
            else (self.full, self.category)
        )
        self.probe_from, self.probe_to = probed

    def parts(self, timed_end: int | None = None) -> list[tuple[str, str, int, int]]:
        """(key, words, start, end) of each phase that has steps, in order (the timed
        steps ending at ``timed_end`` when they were cut short)."""
        every = [
            ("warmup", "warm-up", 0, self.warmup),
            ("timed", "timed steps", self.timed, timed_end or self.timed_end),
            ("timeline", LIGHT, self.light, self.full),
            ("profiled", FULL, self.full, self.category),
            ("category", CATEGORY, self.category, self.category_end),
            ("snapshot", "memory snapshot", self.snapshot, self.snapshot_end),
            ("residual", RESIDUAL, self.residual, self.residual_end),
            ("light_cost", COST, self.cost, self.cost_end),
        ]
        return sorted((p for p in every if p[3] > p[2]), key=lambda p: p[2])

    def to_manifest(self, timed_end: int | None = None) -> list[dict[str, Any]]:
        """The manifest's ``schedule``: each phase's first and last step (1-based)."""
        return [{"phase": k, "steps": [a + 1, b]} for k, _, a, b in self.parts(timed_end)]

    def probed(self) -> str:
        """Which steps are probed, in words."""
        lo, hi = self.probe_from + 1, self.probe_to
        where = (
            "warm-up"
            if self.probe_to == self.warmup
            else "category"
            if self.probe_from == self.category
            else "profiled"
        )
        return f"the {where} step{'s' if hi > lo else ''} {lo}" + (f"-{hi}" if hi > lo else "")

    def describe(self) -> str:
        p = self.profiler
        n = {k: b - a for k, _, a, b in self.parts()}
        light = f", {n['timeline']} in the {LIGHT} (CUDA only)" if "timeline" in n else ""
        cat = f", {n['category']} in the {CATEGORY} (memory by category)" if "category" in n else ""
        snap = f", {n['snapshot']} in the memory snapshot" if "snapshot" in n else ""
        if "snapshot" in n and self.snapshot < self.category_end:
            snap = f", the memory snapshot over the {CATEGORY}'s last {n['snapshot']}"
        after = [f"{n['residual']} in the {RESIDUAL}"]
        if "light_cost" in n:
            after.append(f"{n['light_cost']} in the {COST}")
        cost = f"; then {' and '.join(after)} where the loop runs on"
        prof = f"{p.steps} profiled (wait {p.wait}, warm-up {p.warmup}, active {p.active}, "
        prof += f"repeat {p.repeat})"
        timed = f"{self.warmup} warm-up, {self.steps} timed before any pass"
        return f"{timed}{light}, {prof}{cat}{snap}: {self.complete_at} steps{cost}"

    def reached(self, n: int) -> str:
        """Where a loop that ended after ``n`` steps was, in words."""
        for _, words, a, b in self.parts():
            if a < n < b:
                return f"{n - a} of the {b - a} steps of the {words}"
            if n == b:
                return f"the {words} done"
        return f"{n} steps"  # beyond the schedule

    def lowered(self, python: bool = False) -> tuple[int, list[str]]:
        """The least minimum the options allow (one warm-up step, one timed, one recorded;
        no light pass, category step or snapshot) and the options that get it (``python``:
        as ``tracekit.profile()``'s keywords, else ``tracekit run``'s flags)."""
        p = self.profiler
        least = Phases(1, 1, ProfilerConfig(wait=0, warmup=0, active=1, memory_timeline=False),
                       0, light=False)  # fmt: skip
        on = {"timed": self.steps > 1 or self.warmup > 1, "wait": p.wait > 0,
              "warmup": p.warmup > 0, "active": p.active > 1,
              "repeat": p.repeat > 1, "category": self.category_end > self.category,
              "light": self.full > self.light,
              "snapshot": self.snapshot_end > self.snapshot}  # fmt: skip
        return least.minimum, [py if python else flag for k, flag, py in LOWER if on[k]]

    def too_short(self, n: int, python: bool = False) -> str:
        """What a loop that ended after ``n`` steps, before the full pass was done, is told:
        the minimum, and how to lower it."""
        least, opts = self.lowered(python)
        lower = (
            f"; run it for more steps, or lower the minimum to {least} with {' '.join(opts)}"
            if opts and least < self.minimum
            else "; run it for more steps"
        )
        return (
            f"the loop ended after {n} steps, before any profiled step was recorded: this "
            f"schedule needs at least {self.minimum} ({self.describe()}){lower}"
        )


STEPS, WARMUP = 20, 5  # the fixed schedule's timed and warm-up steps (collect's defaults)


def schedule_options(steps: int | None, warmup: int | None) -> dict[str, Any]:
    """``steps``, ``warmup`` and ``fit`` of a :class:`SessionConfig` from the options as given
    (None: not given). Neither given: the schedule fitted to a loop of unknown length (a
    1-step warm-up, :data:`FIT_TIMED` timed steps, the profiled passes); either given: the
    fixed schedule (warm-up, timed, profiled; 5 and 20 where not given). Both are timed
    before any pass, and the loop must complete them."""
    fit = steps is None and warmup is None
    return {
        "steps": STEPS if steps is None else steps,
        "warmup": (FIT_WARMUP if fit else WARMUP) if warmup is None else warmup,
        "fit": fit,
    }


def counters_start(manifest: dict[str, Any] | None, warmup: int) -> int:
    """The step whose end opens the counters replay's range: the one before the run's first
    timed step (``manifest.schedule``), else ``warmup``'s."""
    timed = [p for p in (manifest or {}).get("schedule") or [] if p.get("phase") == "timed"]
    return int(timed[0]["steps"][0]) - 1 if timed else warmup


class BoundaryTimer:
    """Times steps between step ends without synchronising; :meth:`millis` syncs once.

    One mark per step end: a CUDA event recorded on the current stream (``perf_counter``
    on CPU); :meth:`lap` ends the open step and starts the next at the same mark, as a
    loop that records one event per iteration does. :meth:`start`/:meth:`stop` leave out
    what runs between two steps (the profiler's ``step()``)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._open: Any = None
        self._spans: list[tuple[Any, Any]] = []

    def _mark(self) -> Any:
        if self.device.type == "cuda":
            ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        self._open = self._mark()

    def stop(self) -> None:
        if self._open is not None:
            self._spans.append((self._open, self._mark()))
            self._open = None

    def lap(self) -> None:
        mark = self._mark()
        if self._open is not None:
            self._spans.append((self._open, mark))
        self._open = mark

    def millis(self) -> list[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [float(s.elapsed_time(e)) for s, e in self._spans]
        return [(e - s) * 1e3 for s, e in self._spans]


class ResidualCheck:
    """After every pass (:mod:`tracekit.collectors.observer`): what the passes left switched
    on against what was on before them, and the unprofiled steps timed again, from step
    end ``start`` on, one mark per step end as the timed steps."""

    def __init__(self, device: torch.device, start: int) -> None:
        self.start_at = start
        self.timer = BoundaryTimer(device)
        self.device = device

    def start(self, before: dict[str, Any], model: Any) -> dict[str, Any]:
        """The manifest's ``observer`` entries of the state now; starts the timer."""
        seen = observer.after_passes(before, model, self.device)
        self.timer.start()
        return seen

    def lap(self) -> None:
        self.timer.lap()

    def end(self) -> tuple[list[float], tuple[int, int] | None]:
        """The steps timed (synchronises once) and their first and last step (1-based)."""
        ms = self.timer.millis()
        return ms, (self.start_at + 1, self.start_at + len(ms)) if ms else None


class Window:
    """One profiler over the steps ``start + 1`` … ``end``: made and entered at the end of
    step ``start``, stepped at each step end after, closed at the end of step ``end``;
    each of its steps timed (:class:`BoundaryTimer`, ``Profiler.step()`` left out).
    ``state``: ``ahead``, ``open``, ``closed`` (then :attr:`ms` holds the recorded steps'
    times and :attr:`profiler` what it wrote) or ``aborted`` (left without an export)."""

    def __init__(
        self, name: str, start: int, end: int, make: Callable[[], Profiler], device: torch.device
    ) -> None:
        self.name = name
        self.start, self.end = start, end
        self.make = make
        self.device = device
        self.profiler: Profiler | None = None
        self.state = "ahead"
        self.ms: list[float] = []
        self._timer: BoundaryTimer | None = None

    def end_step(self, n: int) -> bool:
        """Step ``n`` ended: step the profiler; True when that closed the window."""
        if self.state != "open" or not self.start < n <= self.end:
            return False
        assert self.profiler is not None and self._timer is not None
        self._timer.stop()
        self.profiler.step()
        if n < self.end:
            return False
        self.profiler.__exit__(None, None, None)
        cfg = self.profiler.config
        self.ms = [t for i, t in enumerate(self._timer.millis()) if cfg.is_active(i)]
        self.state = "closed"
        return True

    def begin_step(self, n: int) -> None:
        """Step ``n + 1`` starts: open the window at its start, restart the timer."""
        if n == self.start < self.end and self.state == "ahead":
            self.profiler = self.make()
            self.profiler.__enter__()
            self._timer = BoundaryTimer(self.device)
            self.state = "open"
        if self.state == "open" and self.start <= n < self.end:
            assert self._timer is not None
            self._timer.start()

    def abort(self) -> None:
        """Leave the profiler without exporting (the loop or tracekit failed)."""
        if self.state == "open" and self.profiler is not None:
            self.state = "aborted"
            with contextlib.suppress(Exception):
                self.profiler.__exit__(TracekitError, TracekitError("session ended"), None)


class ProfiledWindows:
    """The light timeline pass, the full pass and the category step over step ends, and
    the manifest entries of what they wrote (``artifacts`` is updated in place as each
    window closes)."""

    def __init__(
        self, config: ProfilerConfig, phases: Phases, device: torch.device, out_dir: Path,
        artifacts: dict[str, Any],
    ) -> None:  # fmt: skip
        self.config = config
        self.device = device
        self.artifacts = artifacts
        self.timeline: dict[str, Any] | None = None  # the manifest's profiler.timeline
        light_on = phases.full > phases.light
        marker = StepMarker(device) if light_on else None  # the full pass's: the same launches

        def light() -> Profiler:  # CUPTI kernels-only, else Kineto's CUDA-only pass
            return TimelinePass(config, out_dir, device=device, kineto=LightProfiler)

        def full() -> Profiler:
            return MarkedProfiler(config, out_dir, device=device, marker=marker)

        def category() -> Profiler:
            return CategoryProfiler(config, out_dir, device=device)

        def cost() -> Profiler:  # the same recorder as the light pass's
            ran = self.light.profiler
            recorder = ran.recorder if isinstance(ran, TimelinePass) else None
            return CostPass(CostRounds(config.light_cost_rounds), out_dir, device=device,
                            recorder=recorder)  # fmt: skip

        self.light = Window(LIGHT, phases.light, phases.full, light, device)
        self.full = Window(FULL, phases.full, phases.category, full, device)
        self.category = Window(CATEGORY, phases.category, phases.category_end, category, device)
        self.cost = Window(COST, phases.cost, phases.cost_end, cost, device)
        self.windows = (self.light, self.full, self.category, self.cost)
        self.timeline_cost: dict[str, Any] | None = None  # metrics.timeline_cost

    def end_step(self, n: int) -> None:
        """Step ``n`` ended: step the open window, record what a closing one wrote."""
        for w in self.windows:
            if w.end_step(n):
                self._closed(w)

    def begin_step(self, n: int) -> None:
        for w in self.windows:
            w.begin_step(n)

    def abort(self) -> None:
        for w in self.windows:
            w.abort()

    def _closed(self, w: Window) -> None:
        prof, arts = w.profiler, self.artifacts
        assert prof is not None
        arts.update(prof.artifacts())  # the full pass and the category step say their pass
        if isinstance(prof, TimelinePass):
            self.timeline = prof.describe()
        if isinstance(prof, CostPass):
            self.timeline_cost = light_cost(w.ms, prof.rounds, prof.recorder, prof.notes)

    def absent(self, n: int) -> None:
        """Say in ``artifacts`` why what the windows not done after ``n`` steps would have
        written is absent: the light trace, and the memory timeline of the window that was
        to export it."""
        arts = self.artifacts
        if self.light.state != "closed" and self.light.end > self.light.start:
            arts["timeline_trace_absent"] = not_done(self.light, n)
        if not self.config.memory_timeline:
            arts["memory_timeline_absent"] = self.config.memory_timeline_absent_reason()
            return
        for w in (self.full, self.category):
            if w.state != "closed" and w.end > w.start:
                arts["memory_timeline_absent"] = not_done(w, n)
                return


def not_done(w: Window, n: int) -> str:
    return f"the loop ended {'before' if n <= w.start else 'in'} the {w.name}"


def unreached(config: ProfilerConfig, phases: Phases | None, artifacts: dict[str, Any]) -> None:
    """``artifacts`` of a session that ended before its profiled windows were made
    (``phases`` None: before a step ended)."""
    if not artifacts["timeline_trace_absent"]:
        artifacts["timeline_trace_absent"] = (
            "no step ended, so the device is unknown"
            if phases is None
            else f"the loop ended before the {LIGHT}"
        )
    if not artifacts["memory_timeline_absent"]:
        artifacts["memory_timeline_absent"] = (
            config.memory_timeline_absent_reason()
            if not config.memory_timeline
            else f"the loop ended before the {FULL}"
        )


class CountersRange:
    """The Nsight Compute replay's stand-in for a :class:`Session`: at the end of step
    ``start`` it opens the CUDA profiler range (``cudaProfilerStart``), at the next step's
    end it closes it, and is complete; ``ncu --profile-from-start off`` profiles only the
    launches in between: one steady-state step."""

    def __init__(self, start: int, cudart: Any = None, sync: Callable[[], None] | None = None):
        if start < 1:
            raise UsageError(f"the counters step must be >= 1, got {start}")
        self.start = start
        self.n = 0
        self.complete = False
        self.opened_at: int | None = None
        self.closed_at: int | None = None
        self._cudart = cudart
        self._sync = sync

    def _rt(self) -> Any:
        if self._cudart is None:
            self._cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
        return self._cudart

    def _synchronize(self) -> None:
        (self._sync or torch.cuda.synchronize)()

    def boundary(self) -> None:
        self.n += 1
        if self.n == self.start:
            self._synchronize()
            self._rt().cudaProfilerStart()
            self.opened_at = self.n
        elif self.n == self.start + 1:
            self._synchronize()
            self._rt().cudaProfilerStop()
            self.closed_at = self.n
            self.complete = True

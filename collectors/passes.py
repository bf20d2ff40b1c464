"""The profiled passes beside the full one: a light timeline pass and a memory-category step.

The full pass (:class:`tracekit.collectors.profiler.Profiler` with shapes, memory and
FLOPs) costs the step its timeline: recording CPU operators and their shapes made a
GPU-bound H200 step 2-3x longer, so idle time, launch-bound verdicts and overlap read
from it are the profiler's. Kernel durations survive, so collect records the step twice:

* the **timeline pass** (:class:`LightProfiler`), before the full one, with the same
  schedule: CUDA activity only (kernels, memcpy/memset, runtime launch calls, no
  ``cpu_op``, no options). Kineto then writes no ``ProfilerStep#N`` annotation, so each
  recorded step starts by launching a marker kernel, ``torch.cuda._sleep(1)`` (its kernel
  is ``spin_kernel``: ``aten/src/ATen/cuda/Sleep.cu``), and the last step is closed by one
  more; where ``_sleep`` is missing the host times of those moments go to a sidecar
  ``<worker>.<ts>.timeline_steps.json`` instead. The trace is
  ``<worker>.<ts>.timeline.json.gz`` — deliberately not ``*.pt.trace.json*``, so that
  ``tracekit.parse.find_trace`` and TensorBoard's plugin do not take it for the run's trace.
  The full pass launches the same markers (:class:`MarkedProfiler`), so both passes run
  the same launch sequence; ``tracekit report`` joins them step by step
  (``tracekit.parse.timeline``, ``tracekit.summary.timeline``).
* the **category step** (:class:`CategoryProfiler`), after the full window when its
  options cannot export the per-category memory timeline (it needs ``with_stack``, which
  makes the main trace heavy): one more cycle of ``wait 0, warmup 1, active 1`` with
  ``record_shapes``, ``profile_memory`` and ``with_stack`` that exports only the memory
  timeline, no trace. The manifest says which step it shows (``memory_timeline_pass``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.profiler import Profiler, ProfilerConfig, write_trace
from tracekit.collectors.train import StepTimer, run_steps
from tracekit.io import atomic_write_json

MARKER_CALL = "torch.cuda._sleep(1)"
MARKER_KERNEL = "spin_kernel"  # = tracekit.parse.timeline.MARKER_KERNEL (tested)
TIMELINE_SUFFIX = ".timeline.json.gz"
STEP_STARTS_SUFFIX = ".timeline_steps.json"
STEP_STARTS_FORMAT = "tracekit.step_starts"
MAIN_PASS = "main window"
CATEGORY_PASS = "category step (with stacks)"
_RECORDING = (torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE)


def marker_available(device: torch.device) -> bool:
    """Whether a marker kernel can be launched on ``device`` (CUDA or ROCm builds)."""
    return device.type == "cuda" and callable(getattr(torch.cuda, "_sleep", None))


def timeline_absent_reason(config: ProfilerConfig, device: torch.device) -> str | None:
    """Why the timeline pass does not run (None: it runs)."""
    if not config.timeline_pass:
        return "disabled (--single-pass)"
    if device.type != "cuda":
        return (
            "the timeline pass records CUDA activity only (a CPU step has none); this run is "
            f"on {device.type}"
        )
    return None


def light_experimental_kwargs() -> dict[str, bool]:
    """The light pass's Kineto options this torch accepts: ``disable_external_correlation``
    (torch >= 2.4); empty where it is unknown."""
    try:
        torch._C._profiler._ExperimentalConfig(disable_external_correlation=True)
    except (AttributeError, TypeError):
        return {}
    return {"disable_external_correlation": True}


class StepMarker:
    """Marks the start of a recorded step: a marker kernel on the current stream (where
    ``torch.cuda._sleep`` exists), and always the host time (``time.time_ns()``, the clock
    of the trace's ``baseTimeNanoseconds``)."""

    def __init__(self, device: torch.device, kernel: bool | None = None) -> None:
        self.device = device
        self.kernel = marker_available(device) if kernel is None else kernel
        self.host_ns: list[int] = []

    def mark(self) -> None:
        self.host_ns.append(time.time_ns())
        if self.kernel:
            with torch.cuda.device(self.device):
                torch.cuda._sleep(1)  # type: ignore[no-untyped-call]

    def describe(self) -> str:
        if self.kernel:
            return f"kernel: {MARKER_CALL} ({MARKER_KERNEL}) at each recorded step's start"
        return "host time at each recorded step's start (sidecar timeline_steps)"


class MarkedProfiler(Profiler):
    """A :class:`Profiler` that marks each recorded step's start with ``marker`` (and
    closes the window's last step with one more mark), so that a trace without
    ``ProfilerStep`` annotations still shows where steps begin."""

    def __init__(self, *args: Any, marker: StepMarker | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.marker = marker

    def __enter__(self) -> MarkedProfiler:
        super().__enter__()
        assert self._prof is not None
        if self.marker is not None and self._prof.current_action in _RECORDING:
            self.marker.mark()  # the first step is recorded (no wait, no warm-up)
        return self

    def artifacts(self) -> dict[str, Any]:
        """The full pass's entries; a memory timeline it exported is the main window's."""
        arts = super().artifacts()
        return {**arts, "memory_timeline_pass": MAIN_PASS if arts["memory_timeline"] else None}

    def step(self) -> None:
        assert self._prof is not None, "Profiler.step() outside its with-block"
        last = self._prof.current_action == torch.profiler.ProfilerAction.RECORD_AND_SAVE
        if self.marker is not None and last:
            self.marker.mark()  # closes the window's last step
        super().step()
        if self.marker is not None and self._prof.current_action in _RECORDING:
            self.marker.mark()  # opens the next recorded step


class LightProfiler(MarkedProfiler):
    """The timeline pass: CUDA activity only, no options, steps marked; writes
    ``<worker>.<ts>.timeline.json.gz`` (and the step-start sidecar without a marker
    kernel)."""

    def __init__(self, config: ProfilerConfig, out_dir: Path, **kw: Any) -> None:
        bare = dataclasses.replace(
            config, record_shapes=False, profile_memory=False, with_flops=False,
            with_stack=False, with_modules=False, memory_timeline=False,
        )  # fmt: skip
        device = kw["device"]
        kw.setdefault("marker", StepMarker(device))
        super().__init__(bare, out_dir, **kw)
        self.timelines: list[Path] = []
        self.step_starts: list[Path] = []

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CUDA]

    def experimental_config(self) -> Any:
        """No external correlation: it ties kernels to CPU operators, which this pass does
        not record (``benchmarks/light_pass_cost.py --external-correlation`` measures both).
        Kernels keep CUPTI's own correlation with their launch calls, which the join uses."""
        if not light_experimental_kwargs():
            return None
        return torch._C._profiler._ExperimentalConfig(disable_external_correlation=True)

    def _trace_ready(self, prof: torch.profiler.profile) -> None:
        if self._aborting:
            return
        stem = f"{self.worker_name}.{time.time_ns()}"
        if self.on_export:
            self.on_export("timeline trace")
        self.timelines.append(write_trace(prof, self.out_dir / f"{stem}{TIMELINE_SUFFIX}"))
        assert self.marker is not None
        if not self.marker.kernel:
            path = self.out_dir / f"{stem}{STEP_STARTS_SUFFIX}"
            doc = {
                "format": STEP_STARTS_FORMAT,
                "version": 1,
                "clock": "time.time_ns() (Unix epoch, ns): trace ts = (t - baseTimeNanoseconds)",
                "starts_ns": list(self.marker.host_ns),
            }
            atomic_write_json(path, doc)
            self.step_starts.append(path)
        self.marker.host_ns.clear()

    def artifacts(self) -> dict[str, Any]:
        return {
            "timeline_trace": self.timelines[0].name if self.timelines else None,
            "timeline_traces": [p.name for p in self.timelines],
            "timeline_steps": self.step_starts[0].name if self.step_starts else None,
        }

    def describe(self) -> dict[str, Any]:
        """The manifest's ``profiler.timeline``: how the pass ran."""
        assert self.marker is not None
        return {
            "activities": ["cuda"],
            "options": "none (no record_shapes, profile_memory, with_flops, with_stack)",
            "external_correlation": not light_experimental_kwargs(),
            "schedule": {k: getattr(self.config, k) for k in ("wait", "warmup", "active")},
            "order": "before the full pass, same schedule",
            "step_marker": self.marker.describe(),
        }


def category_config(config: ProfilerConfig) -> ProfilerConfig:
    """The category step's options: one recorded step with what export_memory_timeline
    needs, nothing else."""
    return dataclasses.replace(
        config, wait=0, warmup=1, active=1, repeat=1, record_shapes=True, profile_memory=True,
        with_stack=True, with_flops=False, with_modules=False, memory_timeline=True,
    )  # fmt: skip


def category_pass_needed(config: ProfilerConfig) -> bool:
    """Whether the category step runs: the timeline is wanted and the main window's
    options cannot export it. Decided from the options alone, never from how the main
    window's export went: every rank of a multi-GPU run must run the same steps (a rank
    whose export failed and ran two more steps alone would wait for the others in DDP's
    next collective for ever)."""
    return config.memory_timeline and config.memory_timeline_absent_reason() is not None


class CategoryProfiler(Profiler):
    """The category step: exports only the per-category memory timeline, no trace."""

    def __init__(self, config: ProfilerConfig, out_dir: Path, **kw: Any) -> None:
        super().__init__(category_config(config), out_dir, **kw)

    def _trace_ready(self, prof: torch.profiler.profile) -> None:
        if self._aborting:
            return
        self._memory_timeline(prof, f"{self.worker_name}.{time.time_ns()}")

    def artifacts(self) -> dict[str, Any]:
        return {
            "memory_timeline": self.memory_timelines[0].name if self.memory_timelines else None,
            "memory_timeline_absent": self.memory_timeline_absent,
            "memory_timeline_pass": CATEGORY_PASS if self.memory_timelines else None,
        }


def profiled_steps(
    step: Callable[[int], torch.Tensor],
    profiler: Profiler,
    start: int,
    on_step: Callable[[], None] | None = None,
) -> list[float]:
    """Run one profiler's schedule of steps (from global step ``start``) under it; the
    recorded steps' times (CUDA events, read once at the end)."""
    cfg = profiler.config
    timer = StepTimer(profiler.device)
    with profiler:
        run_steps(step, cfg.steps, start=start, timer=timer, stepper=profiler, on_step=on_step)
    return [t for i, t in enumerate(timer.millis()) if cfg.is_active(i)]

"""A profiling session driven by step ends: shared by ``tracekit run`` and ``tracekit.profile()``.

``collect`` owns its training loop; here the loop is the user's, and tracekit only hears
when a step ends (:meth:`Session.boundary`: an optimizer step hook, a marked function,
``prof.step()``). Counting those ends, the session runs ``collect``'s schedule:

1. ``warmup`` warm-up steps: at the end of the first one it learns the device, the
   optimizer, the model (:mod:`tracekit.collectors.introspect`); the ones after it are
   *probed* (:class:`Probes`: the model's input, ``torch.cuda.memory_allocated`` samples
   for the average memory; with ``warmup=1``, the profiled steps are probed instead);
2. ``steps`` steps timed **without the profiler and without the probes**: one CUDA event
   recorded at each step end, read once after the last (``perf_counter`` on CPU); peak
   memory from ``torch.cuda.max_memory_allocated/reserved`` after
   ``reset_peak_memory_stats``;
3. the profiled windows of ``collect`` (:mod:`tracekit.collectors.session_windows`): on
   CUDA, unless ``profiler.timeline_pass`` is off, the **light timeline pass**
   (``wait + warmup + active`` steps × ``repeat``, CUDA activity only, steps marked); the
   **full pass** over as many steps (the same markers when the light pass ran); when
   :func:`tracekit.collectors.passes.category_pass_needed`, the **category step** (two
   steps: the per-category memory timeline only); the recorded steps of the first two
   timed as above;
4. on CUDA, ``snapshot_steps`` steps recorded into a memory snapshot.

Then it is *complete*. Where the loop runs on, the residual check
(:mod:`tracekit.collectors.observer`: what the passes left switched on, and unprofiled
steps timed again against the first timed ones) and the light pass's cost rounds follow;
then the run folder (the same as ``collect``'s, built under a temporary name and renamed
into place, ``manifest.json`` last) is written, or when the caller closes the session. A
session closed before it is complete writes the folder with status ``incomplete`` (or
``error``/``oom`` when the loop raised) and what it measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import tracekit.collectors.observer as observer
from tracekit.collectors import introspect, run_manifest
from tracekit.collectors.ceilings import measure_ceilings
from tracekit.collectors.collect import (
    SNAPSHOT,
    TENSORBOARD,
    device_info,
    empty_artifacts,
    versions,
)
from tracekit.collectors.passes import timeline_absent_reason
from tracekit.collectors.profiler import (
    ProfilerConfig,
    dump_memory_snapshot,
    memory_snapshot_absent_reason,
    start_memory_history,
    stop_memory_history,
)
from tracekit.collectors.run_manifest import Measured
from tracekit.collectors.session_windows import (
    BoundaryTimer,
    Phases,
    ProfiledWindows,
    ResidualCheck,
    unreached,
)
from tracekit.errors import DeviceError, UsageError
from tracekit.io import atomic_dir
from tracekit.manifest import MANIFEST, write_manifest

DEVICES = ("auto", "cuda", "cpu")


def _check_int(name: str, value: object, low: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class SessionConfig:
    """The schedule and outputs of one session. Invalid values raise :class:`UsageError`.

    ``warmup`` is at least 1: a step is known to have *started* only when the one before
    it ended, and the first step's end is where the device, optimizer and model are
    learnt. ``samples_per_step``/``tokens_per_step`` override what is inferred from the
    model's inputs. ``fit``: the schedule fitted to a loop of unknown length
    (:class:`~tracekit.collectors.session_windows.Phases`: the profiled passes first, then
    up to ``steps`` timed steps); :func:`~tracekit.collectors.session_windows.schedule_options`
    chooses it when neither
    ``steps`` nor ``warmup`` was given."""

    out: Path
    steps: int = 20
    warmup: int = 5
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    device: str = "auto"
    ceilings: bool = True
    memory_snapshot: bool = True
    snapshot_steps: int = 1
    samples_per_step: int | None = None
    tokens_per_step: int | None = None
    counters: bool = False
    quiet: bool = False
    fit: bool = False

    def __post_init__(self) -> None:
        _check_int("steps", self.steps, 1)
        _check_int("warmup", self.warmup, 1)
        _check_int("snapshot_steps", self.snapshot_steps, 1)
        _check_int("samples_per_step", self.samples_per_step, 1, optional=True)
        _check_int("tokens_per_step", self.tokens_per_step, 1, optional=True)
        if not isinstance(self.profiler, ProfilerConfig):
            raise UsageError("profiler must be a tracekit.collectors.ProfilerConfig")
        if self.device not in DEVICES:
            raise UsageError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        for name in ("ceilings", "memory_snapshot", "counters", "quiet", "fit"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be true or false")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"{out} exists and is not a folder")
        object.__setattr__(self, "out", out)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["profiler"] = self.profiler.to_dict()
        d["out"] = str(self.out)
        return d


AT_STEP_END = "at the step's end (after the optimizer step)"


class Probes:
    """Hooks that watch the user's loop without changing it, only in the probed steps.

    Global optimizer step hooks record which optimizers step (from the first step on);
    in the probed steps (:meth:`start` … :meth:`stop`) ``torch.cuda.memory_allocated`` (a
    host-side counter: no sync, but tens of µs of Python) is read where ``collect`` reads
    it: at the step's end (after the optimizer step), after the backward pass (the
    optimizer's pre-step hook), and before and after the model's forward (module hooks;
    no-ops inside ``torch.compile``), where an :class:`InputRecorder` also records the
    model's input. :meth:`stop` removes every hook: the timed steps run without them."""

    def __init__(self) -> None:
        self.optimizers: list[torch.optim.Optimizer] = []
        self.samples: list[int] = []
        self.sampling = False
        self.device: torch.device | None = None
        self.points: set[str] = set()
        self.recorder = introspect.InputRecorder()
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._handles.append(register_optimizer_step_pre_hook(self._pre_step))
        self._handles.append(register_optimizer_step_post_hook(self._post_step))

    def start(self, model: torch.nn.Module | None) -> None:
        """Probe the steps from here on: hooks (the model's too), inputs, memory."""
        if not self._handles:
            self.install()
        if model is not None:
            self._handles.append(
                model.register_forward_pre_hook(self._pre_forward, with_kwargs=True)
            )
            self._handles.append(model.register_forward_hook(self._post_forward))
        self.samples.clear()
        self.sampling = True
        self.recorder.enabled = True
        self.sample(AT_STEP_END)

    def end_step(self) -> None:
        self.sample(AT_STEP_END)
        self.recorder.end_step()

    def stop(self) -> None:
        """No probe from here on: sampling and recording off, every hook removed."""
        self.sampling = False
        self.recorder.enabled = False
        self.remove()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def sample(self, point: str) -> None:
        if self.sampling and self.device is not None and self.device.type == "cuda":
            self.samples.append(int(torch.cuda.memory_allocated(self.device)))
            self.points.add(point)

    def _seen(self, opt: torch.optim.Optimizer) -> None:
        if not any(o is opt for o in self.optimizers):
            self.optimizers.append(opt)

    def _pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._seen(opt)
        self.sample("after backward (optimizer pre-step hook)")

    def _post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._seen(opt)

    def _pre_forward(self, module: Any, args: Any, kwargs: Any) -> None:
        if torch.compiler.is_compiling():
            return None
        self.recorder(module, args, kwargs)
        self.sample("before the model's forward")
        return None

    def _post_forward(self, module: Any, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return None
        self.sample("after the model's forward")
        return None


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".strip()


class SessionFailure(BaseException):
    """tracekit's own work at a step end failed; raised out of the user's loop to stop it
    (a BaseException, so the loop's ``except Exception`` does not swallow it)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(_one_line(cause))
        self.cause = cause


class Session:
    """The schedule of :class:`SessionConfig` over the step ends the caller reports.

    ``workload`` names the producer in the manifest (``script``, ``profile``); ``extra``
    entries are added to the manifest (the runner's ``script`` section) and may be
    updated until the folder is written. With ``finalize_on_complete`` the folder is
    written at the step end that completes the schedule; otherwise at :meth:`close`."""

    def __init__(
        self,
        cfg: SessionConfig,
        *,
        workload: str,
        extra: dict[str, Any] | None = None,
        config_extra: dict[str, Any] | None = None,
        finalize_on_complete: bool = False,
        log: Callable[[str], None] | None = None,
        python_names: bool = False,
    ) -> None:
        self.cfg = cfg
        self.python_names = python_names  # messages name profile()'s keywords, not flags
        self.workload = workload
        self.extra = extra if extra is not None else {}
        self.config_extra = config_extra if config_extra is not None else {}
        self.finalize_on_complete = finalize_on_complete
        self._log = log
        self.n = 0  # steps completed
        self.complete = False
        self.finalized = False
        self.status: str | None = None
        self.device: torch.device | None = None
        self.model: torch.nn.Module | None = None
        self.model_absent = "not searched: no optimizer stepped"
        self.probes = Probes()
        self.measured = Measured()
        self.phases: Phases | None = None
        self.manifest: dict[str, Any] | None = None
        self._stack = contextlib.ExitStack()
        self._tmp: Path | None = None
        self._timer: BoundaryTimer | None = None
        self._residual_timer: ResidualCheck | None = None
        self._state_before: dict[str, Any] | None = None  # observer.state() before any pass
        self.observer: dict[str, Any] = {}  # the manifest's observer block
        self.windows: ProfiledWindows | None = None  # from the end of the timed steps
        self._recording = False
        self.artifacts: dict[str, Any] = empty_artifacts()
        self.shortened: list[dict[str, Any]] = []  # the manifest's schedule_shortened

    # ------------------------------------------------------------------ lifecycle

    @property
    def run_dir(self) -> Path:
        return self.cfg.out

    def log(self, text: str) -> None:
        if self._log is not None and not self.cfg.quiet:
            self._log(text)

    def open(self) -> None:
        """Start: the temporary run folder beside ``cfg.out`` and the optimizer hooks."""
        if self.cfg.device != "auto":
            self._set_device(torch.device(self.cfg.device))  # DeviceError: nothing written
        self._tmp = self._stack.enter_context(atomic_dir(self.cfg.out))
        (self._tmp / TENSORBOARD).mkdir()
        self.probes.install()

    def boundary(self) -> None:
        """A step ended. Raises :class:`SessionFailure` if tracekit's own work fails."""
        if self.finalized or self._tmp is None:
            self.n += 1
            return
        self.n += 1
        try:
            self._advance(self.n)
        except Exception as e:
            self._abort_windows()
            raise SessionFailure(e) from e

    @property
    def finished(self) -> bool:
        """Complete, and past the light pass's cost rounds too (nothing is left to run)."""
        ph = self.phases
        return self.complete and ph is not None and self.n >= ph.done

    def close(self, error: BaseException | None = None) -> Path:
        """Write the folder now (unless it was written at completion): status ``ok`` when
        complete, ``error``/``oom`` when ``error`` (the loop's exception) is given,
        ``incomplete`` otherwise. Returns the run folder."""
        if self.finalized:
            return self.cfg.out
        if self._tmp is None:
            raise RuntimeError("Session.close() before open()")
        self._abort_windows()
        if self._recording:
            stop_memory_history()
            self._recording = False
        if error is not None:
            oom = isinstance(error, torch.OutOfMemoryError)
            line = error.cause if isinstance(error, SessionFailure) else error
            if not isinstance(error, SessionFailure):  # the timed steps that ran are kept
                with contextlib.suppress(Exception):
                    self._cut_timed()
            self._finalize("oom" if oom else "error", _one_line(line))
        elif not self.complete:
            with contextlib.suppress(Exception):
                self._cut_timed()
            self._finalize("incomplete", self.incomplete_message())
        else:
            self._finalize("ok", None)
        return self.cfg.out

    def amend(self, entries: dict[str, Any]) -> None:
        """Update top-level entries of a written manifest (how a script that ran on after
        its profile ended), atomically."""
        if not self.finalized or self.manifest is None:
            raise RuntimeError("Session.amend() before the manifest was written")
        self.manifest.update(entries)
        self.manifest = dict(write_manifest(self.cfg.out / MANIFEST, self.manifest).raw)

    def abandon(self, exc: BaseException) -> None:
        """Ctrl-C: remove the temporary folder, keep nothing (an older run stays)."""
        self._abort_windows()
        self.probes.remove()
        if self._recording:
            stop_memory_history()
            self._recording = False
        self._stack.__exit__(type(exc), exc, exc.__traceback__)
        self.finalized = True

    def incomplete_message(self) -> str:
        """What a loop that ended before the schedule was done reached, and what it needed."""
        if self.n == 0:
            return "no step ended, so nothing was measured"
        if self.phases is None:  # not reached: the device is known at the first step's end
            return f"the loop ended after {self.n} steps"
        ph = self.phases
        if ph.fit and self.n < ph.category:  # the full pass not done: no trace
            return str(ph.too_short(self.n, self.python_names))
        needs = "a complete run needs at least" if ph.fit else "the schedule needs"
        return (
            f"the loop ended after {self.n} steps ({ph.reached(self.n)}); {needs} "
            f"{ph.minimum} ({ph.describe()})"
        )

    # --------------------------------------------------------------- the schedule

    def _set_device(self, device: torch.device) -> None:
        if device.type not in ("cuda", "cpu"):
            raise DeviceError(
                f"the training runs on {device.type}; tracekit times and profiles CUDA and CPU"
            )
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise DeviceError(
                    f"device cuda was requested but CUDA is not available (torch "
                    f"{torch.__version__}); use device cpu"
                )
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.probes.device = device
        if device.type == "cuda":
            graphs = self.config_extra.get("step_marker") == "cuda-graph"
            self.observer["cupti_teardown"] = observer.arrange_teardown(
                torch.version.cuda, graphs
            ).to_dict()
        cfg = self.cfg
        snapshot = cfg.memory_snapshot and memory_snapshot_absent_reason(device) is None
        no_light = timeline_absent_reason(cfg.profiler, device)
        self.artifacts["timeline_trace_absent"] = no_light
        snap = cfg.snapshot_steps if snapshot else 0
        ph = Phases(cfg.warmup, cfg.steps, cfg.profiler, snap, light=no_light is None, fit=cfg.fit)
        self.phases = ph
        self.measured.probed = ph.probed()
        self.measured.timed_steps = (ph.timed + 1, ph.timed_end)

    def _discover(self) -> None:
        """End of the first step: the device, the optimizer's parameters, the model."""
        params = introspect._unique_params(self.probes.optimizers)
        if self.device is None:
            if params:
                self._set_device(params[0].device)
            elif torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                self._set_device(torch.device("cuda", torch.cuda.current_device()))
            else:
                self._set_device(torch.device("cpu"))
        if params:
            self.model = introspect.find_model(params)
            if self.model is None:
                self.model_absent = "no live nn.Module holds the optimizer's parameters"
        assert self.phases is not None
        self.log(
            f"schedule: {self.phases.describe()}; device {self.device}; optimizer: "
            f"{', '.join(type(o).__name__ for o in self.probes.optimizers) or 'none'}; model: "
            f"{type(self.model).__name__ if self.model is not None else 'not found'}; "
            f"input and memory probes in {self.phases.probed()}"
        )

    def _advance(self, n: int) -> None:
        ph = self.phases
        # the timed steps: one mark per step end, before anything else runs here
        if ph is not None and ph.timed < n <= ph.timed_end and self._timer is not None:
            self._timer.lap()
        if ph is not None and ph.residual < n <= ph.residual_end and self._residual_timer:
            self._residual_timer.lap()
        if n == 1:
            self._discover()
        ph, dev = self.phases, self.device
        assert ph is not None and dev is not None
        # ends of steps: the open profiled window steps, or closes and exports
        if ph.probe_from < n <= ph.probe_to:
            self.probes.end_step()
        if self.windows is not None:
            self.windows.end_step(n)
        # phase changes
        if n == ph.probe_to:
            self._end_probes()
        if n == ph.timed_end:
            self._end_timed()
        if n == ph.light:
            self._start_profiler()
        if n == ph.snapshot and ph.snapshot_end > ph.snapshot:
            start_memory_history()
            self._recording = True
        if n == ph.snapshot_end and self._recording:
            dump_memory_snapshot(dev, self._tmp_path(SNAPSHOT))
            stop_memory_history()
            self._recording = False
            self.artifacts["memory_snapshot"] = SNAPSHOT
        if n == ph.probe_from:
            self.probes.start(self.model)
        elif n == 1:
            self.probes.stop()  # found the optimizers; the probes come back later
        if n == ph.timed:
            self._start_timed()
        if n == ph.residual_end:
            self._end_residual()
        if n == ph.residual:
            self._start_residual()
        # starts of steps: a window whose first step starts opens; the open one's timer
        if self.windows is not None:
            self.windows.begin_step(n)
        if n == ph.complete_at:
            self.complete = True  # the light pass's cost rounds may follow
        if n == ph.done and self.finalize_on_complete:
            self._finalize("ok", None)

    def _tmp_path(self, name: str) -> Path:
        assert self._tmp is not None
        return self._tmp / name

    def _end_probes(self) -> None:
        """The probed steps are over: inputs and average memory; every hook removed."""
        m, p = self.measured, self.probes
        p.stop()
        inputs = p.recorder.summary()
        m.inputs = {**inputs, "probed": m.probed} if inputs else None
        if self.device is not None and self.device.type == "cuda":
            m.avg_allocated = sum(p.samples) / len(p.samples) if p.samples else None

    def _start_timed(self) -> None:
        dev = self.device
        assert dev is not None
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        self._state_before = observer.state(self.model)
        self._timer = BoundaryTimer(dev)
        self._timer.start()

    def _start_residual(self) -> None:
        """Every pass is done: what they left behind; the residual window starts."""
        assert self.device is not None and self.phases is not None
        self._residual_timer = ResidualCheck(self.device, self.phases.residual)
        self.observer.update(self._residual_timer.start(self._state_before or {}, self.model))

    def _end_residual(self) -> None:
        """The residual window ended (or the loop ended in it): the steps it timed."""
        check, self._residual_timer = self._residual_timer, None
        if check is not None:
            self.measured.residual_ms, self.measured.residual_steps = check.end()

    def _end_timed(self) -> None:
        dev = self.device
        assert dev is not None and self._timer is not None
        m = self.measured
        m.timed_ms = self._timer.millis()  # synchronises once, after the last timed step
        if dev.type == "cuda":
            m.peak_allocated = int(torch.cuda.max_memory_allocated(dev))
            m.peak_reserved = int(torch.cuda.max_memory_reserved(dev))
        m.matmul_precision = torch.get_float32_matmul_precision()
        m.tf32 = bool(torch.backends.cuda.matmul.allow_tf32) or m.matmul_precision != "highest"
        if self.probes.optimizers:
            m.optimizer = introspect.optimizer_info(self.probes.optimizers)

    def _cut_timed(self) -> bool:
        """The loop ended in the timed steps, after at least one: end them there (what they
        measured is kept; the run is not complete: no pass ran). False otherwise."""
        ph, n = self.phases, self.n
        if ph is None or self._timer is None or not ph.timed < n < ph.timed_end:
            return False
        self._end_timed()
        self.measured.timed_steps = (ph.timed + 1, n)
        self.shortened.append({
            "phase": "timed", "planned": ph.steps, "ran": n - ph.timed, "steps": [ph.timed + 1, n],
            "why": f"the loop ended after {n} steps",
        })  # fmt: skip
        return True

    def _start_profiler(self) -> None:
        """The timed steps are over: the profiled windows follow (light, full, category)."""
        assert self.device is not None and self.phases is not None
        self.windows = ProfiledWindows(
            self.cfg.profiler, self.phases, self.device, self._tmp_path(""), self.artifacts
        )

    def _end_windows(self) -> None:
        """What the windows measured, in :attr:`measured`; why what is missing is."""
        w = self.windows
        if w is None:
            unreached(self.cfg.profiler, self.phases, self.artifacts)
            return
        w.absent(self.n)
        self.measured.profiled_ms = w.full.ms or None
        self.measured.timeline_ms = w.light.ms or None
        self.measured.timeline_cost = w.timeline_cost

    def _abort_windows(self) -> None:
        if self.windows is not None:
            self.windows.abort()

    # ----------------------------------------------------------------- the folder

    def _finalize(self, status: str, error: str | None) -> None:
        if self.probes.sampling:  # the loop ended in the probed steps
            self._end_probes()
        if self._residual_timer is not None:  # the loop ended in the residual check
            with contextlib.suppress(Exception):
                self._end_residual()
        self.probes.remove()
        if not self.artifacts["memory_snapshot"]:
            self.artifacts["memory_snapshot_absent"] = self._snapshot_absent()
        self._end_windows()

        # Read the optimizer and the model, then let go of them: the ceilings need the
        # device memory the script's model held.
        opt = self.measured.optimizer or (
            introspect.optimizer_info(self.probes.optimizers) if self.probes.optimizers else None
        )
        model = introspect.model_info(self.model, opt["n_params"] if opt else None,
                                      self.model_absent)  # fmt: skip
        self.probes.optimizers.clear()
        self.model = None
        ceilings, why = (
            self._ceilings()
            if status in ("ok", "incomplete")
            else (None, "not measured: the run failed")
        )
        self.status = status
        self.manifest = self.build_manifest(status, error, opt, model, ceilings, why)
        # as written (schema_version stamped): what the caller sees is the file
        self.manifest = dict(write_manifest(self._tmp_path(MANIFEST), self.manifest).raw)
        self.finalized = True
        self._stack.close()  # renames the folder into place

    def _snapshot_absent(self) -> str:
        if not self.cfg.memory_snapshot:
            return "disabled (memory_snapshot off)"
        if self.device is None:
            return "no step ended"
        reason = memory_snapshot_absent_reason(self.device)
        return reason or "the loop ended before the snapshot steps"

    def _ceilings(self) -> tuple[dict[str, Any] | None, str | None]:
        if not self.cfg.ceilings:
            return None, "disabled (ceilings off)"
        if self.device is None:
            return None, "no step ended, so the device is unknown"
        used = ["fp32"]
        if self.measured.tf32:
            used.append("tf32")
        if self.device.type == "cuda":
            used += ["bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["fp16"]
        gc.collect()
        try:
            return measure_ceilings(self.device, used).to_dict(), None
        except torch.OutOfMemoryError as e:  # the user's model still holds the memory
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return None, f"not measured: {_one_line(e)}"

    def build_manifest(
        self,
        status: str,
        error: str | None,
        opt: dict[str, Any] | None,
        model: dict[str, Any],
        ceilings: dict[str, Any] | None,
        why: str | None,
    ) -> dict[str, Any]:
        """The manifest (:func:`tracekit.collectors.run_manifest.build`)."""
        dev, cfg, ph = self.device, self.cfg, self.phases
        cut = self.measured.timed_steps[1] if self.shortened and self.measured.timed_steps else None
        self.measured.device_type = dev.type if dev is not None else None
        self.measured.memory_points = tuple(sorted(self.probes.points))
        manifest: dict[str, Any] = run_manifest.build(
            workload=self.workload,
            status=status,
            error=error,
            config={**cfg.to_dict(), **self.config_extra},
            measured=self.measured,
            optimizer=opt,
            model=model,
            versions=versions(dev or torch.device("cpu")),
            device=device_info(dev) if dev is not None else None,
            ceilings=ceilings,
            ceilings_absent=why,
            profiler={
                **cfg.profiler.to_dict(),
                "activities": ["cpu", "cuda"] if dev and dev.type == "cuda" else ["cpu"],
                "steps": cfg.profiler.steps,
                "timeline": self.windows.timeline if self.windows else None,
            },
            artifacts=dict(self.artifacts),
            total_steps=self.n,
            schedule_steps=ph.done if ph else None,
            schedule=ph.to_manifest(cut) if ph else None,
            extra={
                "schedule_mode": "fit" if cfg.fit else "fixed",
                "schedule_minimum_steps": ph.minimum if ph else None,
                "schedule_shortened": self.shortened,
                "observer": run_manifest.observer_block(self.observer, self.measured),
                **self.extra,
            },
        )
        return manifest

"""``tracekit.profile()``: the session of ``tracekit run`` as a context manager in your loop.

::

    import tracekit

    with tracekit.profile("runs/my-model") as prof:
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()  # one call per training step

The schedule, the measurements and the run folder are those of ``tracekit run``
(:mod:`tracekit.collectors.session`). Without ``steps`` and ``warmup`` the schedule fits
the loop: 3 warm-up steps (tracekit's probes run in those after the first), 5 steps timed
before any profiler runs, on CUDA the light timeline pass, the profiler's steps, the
category step (memory by category), a CUDA memory snapshot. With ``steps`` or ``warmup``
it is fixed: ``warmup`` warm-up steps, ``steps`` timed steps, then the profiled passes.
Where the loop runs on, both time 10 more unprofiled steps after every pass (the residual
check, ``manifest.observer``). The folder is written as soon as the schedule is done (the
loop goes on unprofiled), or when the block ends. A block that ends before it is
complete writes the folder with status ``incomplete`` and raises
:class:`tracekit.errors.TracekitError`; a block that raises writes status ``error`` and
lets the exception through.

``counters=True`` re-runs *this program* (``sys.orig_argv``) under Nsight Compute after the
block, twice (the two passes of ``collect --counters``), with ``TRACEKIT_COUNTERS_REPLAY``
set: there ``profile()`` only opens the CUDA profiler range around step ``warmup + 1`` and
ends the program after it. The program must therefore reach that step the same way again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from tracekit.collectors.profiler import ProfilerConfig
from tracekit.collectors.session import Session, SessionConfig
from tracekit.collectors.session_windows import CountersRange, counters_start, schedule_options
from tracekit.errors import TracekitError, UsageError

REPLAY_ENV = "TRACEKIT_COUNTERS_REPLAY"


class Profile:
    """The context manager :func:`profile` returns; call :meth:`step` once per step.

    After the block (or once the schedule is complete): :attr:`run_dir`, :attr:`status`
    (``ok``, ``incomplete``, ``error``, ``oom``), :attr:`manifest`, :attr:`counters`."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.counters: dict[str, Any] | None = None
        self._replay = os.environ.get(REPLAY_ENV) == "1"
        self._session: Session | None = None
        self._range: CountersRange | None = None
        if self.config.counters and not self._replay:
            _check_rerunnable()

    @property
    def run_dir(self) -> Path:
        return Path(self.config.out)

    @property
    def status(self) -> str | None:
        return self._session.status if self._session else None

    @property
    def manifest(self) -> dict[str, Any] | None:
        return self._session.manifest if self._session else None

    @property
    def steps_done(self) -> int:
        driver = self._range or self._session
        return driver.n if driver is not None else 0

    @property
    def complete(self) -> bool:
        driver = self._range or self._session
        return bool(driver and driver.complete)

    def __enter__(self) -> Profile:
        if self._session is not None or self._range is not None:
            raise UsageError("a tracekit.profile() block can be entered once")
        if self._replay:  # the run folder was written before the replay: its schedule
            manifest = self.run_dir / "manifest.json"
            man = json.loads(manifest.read_text()) if manifest.is_file() else None
            self._range = CountersRange(counters_start(man, self.config.warmup))
            return self
        self._session = Session(
            self.config,
            workload="profile",
            config_extra={"step_definition": "from one prof.step() call to the next"},
            finalize_on_complete=True,
            log=_log,
            python_names=True,
        )
        self._session.open()
        return self

    def step(self) -> None:
        """Mark the end of a training step (call it after ``optimizer.step()``)."""
        if self._range is not None:
            self._range.boundary()
            if self._range.complete:
                raise SystemExit(0)  # the counters replay of this program ends here
            return
        if self._session is None:
            raise UsageError("prof.step() outside its `with tracekit.profile(...)` block")
        self._session.boundary()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        sess = self._session
        if sess is None:
            return
        if isinstance(exc, KeyboardInterrupt) and not sess.finalized:
            sess.abandon(exc)
            return
        clean_exit = isinstance(exc, SystemExit) and exc.code in (None, 0)
        sess.close(exc if exc is not None and not clean_exit else None)
        if exc is not None:
            return
        if sess.status == "incomplete":
            raise TracekitError(
                f"tracekit.profile: {sess.incomplete_message()} ({sess.run_dir}/manifest.json "
                "has status 'incomplete')"
            )
        if self.config.counters and sess.status == "ok":
            self.counters = run_program_counters(sess.run_dir)


def _log(text: str) -> None:
    print(f"tracekit: {text}", file=sys.stderr, flush=True)


def _check_rerunnable() -> None:
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None or hasattr(sys, "ps1"):
        raise UsageError(
            "profile(counters=True) re-runs this program under Nsight Compute and needs it "
            "to be a script (python train.py); in an interactive session use "
            "tracekit run --counters -- python train.py"
        )


def program_command() -> list[str]:
    """This program's command line, as it was started (interpreter options included)."""
    orig = getattr(sys, "orig_argv", None)
    return [sys.executable, *(orig[1:] if orig else sys.argv)]


def run_program_counters(run_dir: Path, *, ncu: str | None = None) -> dict[str, Any]:
    """Both ncu passes over one step of this program, re-run with ``TRACEKIT_COUNTERS_REPLAY``."""
    from tracekit.collectors.replay import run_counters

    entry: dict[str, Any] = run_counters(
        run_dir, ncu=ncu, target=program_command(), env={REPLAY_ENV: "1"}
    )
    return entry


def profile(
    out: str | os.PathLike[str],
    *,
    steps: int | None = None,
    warmup: int | None = None,
    wait: int = 1,
    profile_warmup: int = 1,
    active: int = 2,
    repeat: int = 1,
    record_shapes: bool = True,
    profile_memory: bool = True,
    with_flops: bool = True,
    with_stack: bool = False,
    with_modules: bool = False,
    memory_timeline: bool = True,
    single_pass: bool = False,
    light_cost_rounds: int = 6,
    device: str = "auto",
    ceilings: bool = True,
    memory_snapshot: bool = True,
    snapshot_steps: int = 1,
    samples_per_step: int | None = None,
    tokens_per_step: int | None = None,
    counters: bool = False,
    quiet: bool = False,
) -> Profile:
    """Profile the loop inside the ``with`` block; call ``prof.step()`` once per step.

    ``steps`` timed unprofiled steps after ``warmup`` warm-up ones, then on CUDA the light
    timeline pass (the profiler's schedule, CUDA activity only; not with ``single_pass``),
    the profiler's ``wait``/``profile_warmup``/``active`` steps (× ``repeat``) with the
    profiler options of ``tracekit collect``, and, unless ``with_stack`` or not
    ``memory_timeline``, two more steps for the memory by category (the category step);
    with neither ``steps`` nor ``warmup`` given, 3 warm-up and 5 timed steps (the schedule
    fits a loop of unknown length); where the loop runs on, the residual check (10
    unprofiled steps after every pass), then, where the light pass ran, ``light_cost_rounds``
    rounds of its cost
    (5 unprofiled and 5 light steps each, the last 3 of each timed; 0: none);
    ``device``: ``auto`` (the optimizer's parameters' device), ``cuda`` or ``cpu``. Every
    value is checked first (:class:`tracekit.errors.UsageError`). Writes the run folder
    ``out`` (replaced if it exists), for ``tracekit report``."""
    pcfg = ProfilerConfig(
        wait=wait, warmup=profile_warmup, active=active, repeat=repeat,
        record_shapes=record_shapes, profile_memory=profile_memory, with_flops=with_flops,
        with_stack=with_stack, with_modules=with_modules, memory_timeline=memory_timeline,
        timeline_pass=not single_pass, light_cost_rounds=light_cost_rounds,
    )  # fmt: skip
    cfg = SessionConfig(
        out=Path(out), **schedule_options(steps, warmup), profiler=pcfg, device=device,
        ceilings=ceilings, memory_snapshot=memory_snapshot, snapshot_steps=snapshot_steps,
        samples_per_step=samples_per_step, tokens_per_step=tokens_per_step, counters=counters,
        quiet=quiet,
    )  # fmt: skip
    return Profile(cfg)

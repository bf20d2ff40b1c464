"""``tracekit run -- python train.py ARGS…``: profile a training script without editing it.

The script runs in this interpreter as ``python`` would run it: ``__name__ == "__main__"``,
``sys.argv`` as given, its folder first on ``sys.path`` (``-m module``: the current folder),
its own module as ``sys.modules["__main__"]`` while it runs. A step marker
(:mod:`tracekit.collectors.markers`) reports the end of each step to a
:class:`~tracekit.collectors.session.Session`, which runs ``collect``'s schedule and writes
the same run folder. When the schedule is complete the script is stopped (a private
exception raised out of the step end, caught here) unless ``stop_after`` is off; then it
runs to its end and its exit status is passed on.

A script that raises gets its own traceback, as Python prints it (tracekit's frames left
out), its exit status 1, and a run folder with status ``error`` (``oom`` for CUDA out of
memory) holding what was measured. ``--counters`` re-runs the script under Nsight Compute
(``python -m tracekit.collectors.script --replay RUN``, :func:`replay_main`), with the CUDA
profiler range opened around one steady-state step by the same marker.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import hashlib
import importlib.machinery
import importlib.util
import itertools
import json
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors import introspect, markers, session, session_windows
from tracekit.collectors.markers import Marker, make_marker
from tracekit.collectors.session import Session, SessionConfig, SessionFailure
from tracekit.collectors.session_windows import CountersRange
from tracekit.errors import TracekitError, UsageError

USAGE = "tracekit run [OPTIONS] -- python train.py ARGS (or: -- train.py ARGS, -- -m module ARGS)"
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "mpirun", "srun")
_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
# tracekit's own files: left out of the script's traceback
_OURS = {os.path.abspath(m.__file__ or "") for m in (markers, session, introspect)} | {
    os.path.abspath(__file__)
}


class StopScript(BaseException):
    """Raised out of the step end that completes the schedule, to stop the script."""


@dataclass(frozen=True)
class ScriptCommand:
    """What to run: a script path or a module, and the ``sys.argv`` it gets."""

    tokens: tuple[str, ...]
    path: Path | None
    module: str | None
    args: tuple[str, ...]
    python_flags: tuple[str, ...] = ()
    origin: Path | None = None  # the file that runs: the script, or the module's file

    @property
    def argv(self) -> list[str]:
        head = str(self.path) if self.path is not None else str(self.origin or self.module)
        return [head, *self.args]

    @property
    def name(self) -> str:
        return self.path.stem if self.path is not None else str(self.module).split(".")[-1]

    def sha256(self) -> str | None:
        f = self.path or self.origin
        return hashlib.sha256(f.read_bytes()).hexdigest() if f and f.is_file() else None

    def describe(self) -> dict[str, Any]:
        return {
            "command": list(self.tokens),
            "path": str(self.path.resolve()) if self.path else None,
            "module": self.module,
            "file": str(self.origin.resolve()) if self.origin else None,
            "argv": self.argv,
            "python_flags": list(self.python_flags),
            "sha256": self.sha256(),
            "cwd": os.getcwd(),
        }


def parse_command(tokens: Sequence[str]) -> ScriptCommand:
    """``python train.py ARGS``, ``train.py ARGS``, ``[python] -m module ARGS``."""
    toks = list(tokens)
    if not toks:
        raise UsageError(f"no script given: {USAGE}")
    head = Path(toks[0]).name
    if head in LAUNCHERS or "torch.distributed.run" in toks[:3]:
        raise UsageError(
            f"{toks[0]}: distributed launchers are replaced by tracekit run's own: "
            "tracekit run --nproc-per-node N -- python train.py ARGS"
        )
    if _PYTHON.match(head) or os.path.abspath(toks[0]) == os.path.abspath(sys.executable):
        toks = toks[1:]
    flags: list[str] = []
    while toks and toks[0].startswith("-") and toks[0] != "-m":
        flag = toks.pop(0)
        if flag != "-u":
            raise UsageError(
                f"python option {flag} is not supported by tracekit run (the script runs in "
                f"tracekit's interpreter; give it to that: python {flag} -m tracekit.cli run …)"
            )
        flags.append(flag)
    if not toks:
        raise UsageError(f"no script given: {USAGE}")
    if toks[0] == "-m":
        if len(toks) < 2:
            raise UsageError("-m needs a module name")
        module = toks[1]
        origin = _module_file(module)
        return ScriptCommand(tuple(tokens), None, module, tuple(toks[2:]), tuple(flags), origin)
    path = Path(toks[0])
    if not path.exists():
        raise UsageError(f"{path}: no such script")
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give the training script's file")
    return ScriptCommand(tuple(tokens), path, None, tuple(toks[1:]), tuple(flags), path)


def _module_file(module: str) -> Path:
    """The file ``python -m module`` runs (a package's ``__main__``), found as python finds
    it: with the current folder first on ``sys.path``."""
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
            if spec is None:
                raise UsageError(f"-m {module}: a package without __main__")
    except (ImportError, ValueError) as e:
        raise UsageError(f"-m {module}: {type(e).__name__}: {e}") from None
    finally:
        sys.path[:] = saved
    if spec is None or spec.origin is None:
        raise UsageError(f"-m {module}: no module named {module!r}")
    return Path(spec.origin)


# ------------------------------------------------------------------- execution


@dataclass
class Ended:
    """How the script ended."""

    how: str  # 'stopped' | 'finished' | 'exited' | 'raised' | 'failed' (tracekit's own)
    exit_code: int = 0
    error: BaseException | None = None
    traceback: str | None = None


def compile_script(cmd: ScriptCommand, marker: Marker) -> types.CodeType:
    """The script's code object (through the marker's syntax-tree change, if any)."""
    assert cmd.path is not None
    source = cmd.path.read_bytes()
    filename = str(cmd.path.resolve())
    tree = ast.parse(source, filename)
    tree = marker.transform(tree, str(cmd.path))
    code: types.CodeType = compile(tree, filename, "exec", dont_inherit=True)
    return code


@contextlib.contextmanager
def _script_context(cmd: ScriptCommand) -> Iterator[dict[str, Any] | None]:
    """``sys.argv``, ``sys.path`` and ``__main__`` as ``python`` sets them; restored after."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_main = sys.modules.get("__main__")
    sys.argv = cmd.argv
    if "-u" in cmd.python_flags:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(write_through=True)  # type: ignore[union-attr]
    try:
        if cmd.path is not None:
            path = cmd.path.resolve()
            mod = types.ModuleType("__main__")
            mod.__file__ = str(path)
            mod.__cached__ = None  # type: ignore[attr-defined]
            mod.__loader__ = importlib.machinery.SourceFileLoader("__main__", str(path))
            mod.__package__ = None
            mod.__spec__ = None
            sys.modules["__main__"] = mod
            sys.path.insert(0, str(path.parent))
            yield mod.__dict__
        else:
            sys.path.insert(0, os.getcwd())
            yield None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def script_traceback(exc: BaseException, script_file: Path | None) -> str:
    """``exc``'s traceback as ``python script.py`` would print it: from the script's first
    frame on, without tracekit's frames (a marked function's wrapper, the step end)."""
    target = str(script_file.resolve()) if script_file else None
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != target:
        tb = tb.tb_next
    frames = []  # none: an error before the script's first line ran (a SyntaxError)
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) not in _OURS:
            frames.append(tb)
        tb = tb.tb_next
    for a, b in itertools.pairwise(frames):
        a.tb_next = b
    if frames:
        frames[-1].tb_next = None
    exc.__traceback__ = frames[0] if frames else None
    return "".join(traceback.format_exception(exc))


def _exit_code(e: SystemExit) -> tuple[int, str | None]:
    """Python's exit status for ``SystemExit(code)`` and the text it prints, if any."""
    if e.code is None:
        return 0, None
    if isinstance(e.code, int):
        return e.code, None
    return 1, str(e.code)


def execute(cmd: ScriptCommand, marker: Marker, on_step: Callable[[], None]) -> Ended:
    """Run the script with ``marker`` calling ``on_step``; return how it ended.

    ``StopScript`` out of ``on_step`` stops it (``stopped``); ``SessionFailure`` is
    tracekit's own failure (``failed``). ``KeyboardInterrupt`` propagates."""
    with _script_context(cmd) as namespace:
        try:
            marker.install(on_step, namespace)
            if namespace is not None:
                code = compile_script(cmd, marker)
                exec(code, namespace)
            else:
                import runpy

                runpy.run_module(str(cmd.module), run_name="__main__", alter_sys=True)
            return Ended("finished")
        except StopScript:
            return Ended("stopped")
        except SessionFailure as e:
            return Ended("failed", 2, e)
        except SystemExit as e:
            code_, text = _exit_code(e)
            if text:
                sys.stderr.write(text + "\n")
            return Ended("exited", code_, e if code_ else None)
        except (KeyboardInterrupt, UsageError):
            raise
        except BaseException as e:
            tb = script_traceback(e, cmd.origin)
            e.__traceback__ = None  # frames hold the script's model: free them
            return Ended("raised", 1, e, tb)
        finally:
            marker.remove()
            if namespace is not None:
                namespace.clear()  # the script is over: its globals (model, data) go


# ------------------------------------------------------------------------ run


@dataclass(frozen=True)
class RunConfig:
    """One ``tracekit run``: the script's command line, the schedule, the marker."""

    command: tuple[str, ...]
    session: SessionConfig
    step_marker: str = "optimizer"
    stop_after: bool = True

    def __post_init__(self) -> None:
        make_marker(self.step_marker)  # validates the spec

    def to_dict(self) -> dict[str, Any]:
        return {"step_marker": self.step_marker, "stop_after": self.stop_after}


@dataclass
class RunResult:
    run_dir: Path
    status: str
    exit_code: int
    message: str | None = None  # one line for stderr (after the traceback, if any)
    traceback: str | None = None
    steps: int = 0
    is_error: bool = False  # message is tracekit's error (not a note on the script's)
    manifest: dict[str, Any] = field(default_factory=dict)


def default_out(tokens: Sequence[str]) -> Path:
    return Path("runs") / parse_command(tokens).name


def _log(text: str) -> None:
    print(f"tracekit: {text}", file=sys.stderr, flush=True)


def run_script(
    cfg: RunConfig,
    *,
    log: Callable[[str], None] | None = _log,
    after_step: Callable[[Session], bool] | None = None,
) -> RunResult:
    """Run the script under a session; the run folder is written whatever happens, except
    on Ctrl-C (then nothing is left, and ``KeyboardInterrupt`` propagates).

    ``after_step(session)``, when given, runs at each step end after the session's; it
    returns False while it still needs steps after the schedule (a rank's measured
    communication cost, ``collectors/script_rank.py``): the script is stopped only then."""
    cmd = parse_command(cfg.command)
    marker = make_marker(cfg.step_marker)
    if isinstance(marker, markers.FunctionMarker) and marker.local and cmd.path is None:
        raise UsageError(
            f"--step-marker {marker.spec}: with -m name the module: function:module:qualname"
        )
    info = {**cmd.describe(), "ended": None, "exit_code": None, "stopped_at_step": None}
    sess = Session(
        cfg.session,
        workload="script",
        extra={"script": info},
        config_extra={**cfg.to_dict(), "step_definition": marker.definition},
        finalize_on_complete=not cfg.stop_after,
        log=log,
    )
    sess.open()

    def on_step() -> None:
        sess.boundary()
        busy = after_step is not None and not after_step(sess)
        if cfg.stop_after and sess.finished and not busy:
            raise StopScript

    try:
        ended = execute(cmd, marker, on_step)
    except BaseException as e:  # Ctrl-C, or a usage error found while starting the script
        sess.abandon(e)
        raise
    info.update(ended=ended.how, exit_code=ended.exit_code)
    if ended.how == "stopped":
        info["stopped_at_step"] = sess.n
    gc.collect()  # the script's objects, before the ceilings are measured
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.empty_cache()
    error = ended.error if ended.how in ("raised", "failed", "exited") else None
    if sess.finalized and sess.manifest is not None:  # written at completion (--run-on)
        sess.amend({"script": info, "total_steps": sess.n})
    run_dir = sess.close(error)
    return _result(sess, ended, marker, cfg, run_dir)


def _result(
    sess: Session, ended: Ended, marker: Marker, cfg: RunConfig, run_dir: Path
) -> RunResult:
    status = sess.status or "error"
    res = RunResult(run_dir, status, ended.exit_code, None, ended.traceback, sess.n)
    res.manifest = sess.manifest or {}
    where = f"{run_dir}/manifest.json has status '{status}'"
    if ended.how == "failed":
        cause = ended.error.cause if isinstance(ended.error, SessionFailure) else ended.error
        res.message = f"profiling failed at step {sess.n}: {session._one_line(cause)} ({where})"
        res.is_error = True
        res.exit_code = cause.exit_code if isinstance(cause, TracekitError) else 2
        return res
    if ended.how in ("raised", "exited") and ended.exit_code:
        if status in ("error", "oom"):
            res.message = f"the script failed after {sess.n} steps ({where})"
        return res
    if status == "incomplete":
        res.exit_code, res.is_error = 2, True
        if sess.n == 0:
            res.message = f"the script ended without a step: {marker.no_step_message()} ({where})"
        else:
            res.message = f"the script ended too early: {sess.incomplete_message()} ({where})"
        return res
    if ended.how == "stopped":
        res.message = (
            f"stopped the script after step {sess.n}: the schedule is done "
            "(--run-on lets it run to its end)"
        )
    return res


def report_result(result: RunResult, *, counters: bool = False, quiet: bool = False) -> None:
    """What ``tracekit run`` prints: the script's traceback and tracekit's one line on
    stderr, the run's summary on stdout; then the counters passes (``--counters``) on a
    complete CUDA run. A failed counters pass raises (the run folder stays as it is)."""
    from tracekit.collectors.runsummary import summary

    if result.traceback:
        sys.stderr.write(result.traceback)
    if result.message:
        prefix = "tracekit: error: " if result.is_error else "tracekit: "
        print(prefix + result.message, file=sys.stderr, flush=True)
    print(summary(result.run_dir))
    if not counters or result.status != "ok":
        return
    dev = (result.manifest.get("device") or {}).get("type")
    if dev != "cuda":
        raise UsageError(f"--counters needs a CUDA run; this one ran on {dev}")
    entry = run_counters(result.run_dir)
    print(
        f"counters: {entry['profiled_launches']} launch configurations replayed in "
        f"{entry['replay_seconds']:.1f} s -> {result.run_dir / entry['csv']}"
    )
    g = entry.get("gemm")
    if g:
        print(
            f"counters: {g['profiled_launches']} GEMM launches replayed in "
            f"{g['replay_seconds']:.1f} s -> {g['csv'] and result.run_dir / g['csv']}"
        )


# -------------------------------------------------------------------- counters


def counters_target(run_dir: Path) -> list[str]:
    """The command ncu runs: this module's :func:`replay_main` on ``run_dir``."""
    return [sys.executable, "-m", "tracekit.collectors.script", "--replay", str(run_dir.resolve())]


def run_counters(run_dir: Path, *, ncu: str | None = None) -> dict[str, Any]:
    """Both Nsight Compute passes of ``collect --counters`` over one replayed step of the
    script (:func:`replay_main`); updates the run folder's manifest."""
    from tracekit.collectors.replay import run_counters as replay_counters

    entry: dict[str, Any] = replay_counters(run_dir, ncu=ncu, target=counters_target(run_dir))
    return entry


def replay_main(
    run_dir: Path, *, cudart: Any = None, sync: Callable[[], None] | None = None
) -> CountersRange:
    """Re-run the script of ``run_dir`` (its manifest's command, folder and step marker)
    with the CUDA profiler range around the run's first timed step, then stop it."""
    manifest = json.loads((Path(run_dir) / "manifest.json").read_text())
    script = manifest.get("script") or {}
    config = manifest.get("config") or {}
    if not script.get("command"):
        raise UsageError(f"{run_dir}: not a tracekit run folder (no script command)")
    if script.get("cwd"):
        os.chdir(script["cwd"])
    cmd = parse_command(script["command"])
    marker = make_marker(str(config.get("step_marker", "optimizer")))
    start = session_windows.counters_start(manifest, int(config.get("warmup", 1)))
    rng = CountersRange(start, cudart=cudart, sync=sync)

    def on_step() -> None:
        rng.boundary()
        if rng.complete:
            raise StopScript

    ended = execute(cmd, marker, on_step)
    if ended.traceback:
        sys.stderr.write(ended.traceback)
    if not rng.complete:
        raise TracekitError(
            f"the counters replay ended after {rng.n} steps, before step {rng.start + 1} "
            f"({ended.how}, exit status {ended.exit_code})"
        )
    return rng


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--replay":
        print("usage: python -m tracekit.collectors.script --replay RUN_DIR", file=sys.stderr)
        return 2
    try:
        replay_main(Path(argv[1]))
    except TracekitError as e:
        print(f"tracekit: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = [
    "Ended",
    "RunConfig",
    "RunResult",
    "ScriptCommand",
    "StopScript",
    "parse_command",
    "run_script",
]

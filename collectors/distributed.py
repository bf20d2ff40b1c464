"""``tracekit collect --gpus N``: one process per GPU through torch's elastic launcher.

The parent (this module) never touches a GPU. It writes the run description, starts N
ranks (``python -m tracekit.collectors.rank``, ``collectors/rank.py``) with
``torch.distributed.launcher.api.elastic_launch`` -- the agent behind ``torchrun
--standalone``: c10d rendezvous on a free local port, ``RANK``/``LOCAL_RANK``/
``WORLD_SIZE``/``MASTER_*`` set, every worker polled every 0.1 s, and on the first failure
every other worker stopped (SIGTERM to its process group, SIGKILL after 30 s); no restarts.
It is called in-process rather than through a ``torchrun`` subprocess so that the parent
gets each rank's exit code and signal (``ChildFailedError.failures``) and handles Ctrl-C
itself. Each rank is a fresh interpreter (``python -m tracekit.collectors.rank``, so it
imports the tracekit installation the parent runs), with stdout and stderr redirected to
``logs/rank<R>.{stdout,stderr}.log`` in the run folder. A command rather than a Python
callable as the entrypoint: nothing then depends on multiprocessing's spawn re-importing
the parent's ``__main__`` (the console script, pytest), and the file descriptors are
redirected, so NCCL's and gloo's native output lands in the same logs.

After the launcher returns, the parent merges each rank's ``rank<R>.result.json`` into
``manifest.json`` (``collectors/dist_manifest.py``) -- written last, by the parent only --
and the folder is renamed into place complete (``tracekit.io.atomic_dir``).

NVLink multicast stays off: the workers' environment gets ``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and ``NVSHMEM_DISABLE_NVLS=1`` unless the user has
set them. NVLink SHARP (NVLS) collectives and symmetric-memory multicast allocate
multicast objects in the NVSwitch fabric, a resource of the whole host shared by every
job on it; on a shared multi-GPU host, multicast use by one job can take the host's GPUs
out of service for the others. A profiling run does not need it, and its busbw then
measures the ordinary NVLink path that most jobs use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.collect import collect as collect_single
from tracekit.collectors.config import CollectConfig, compile_unsupported_reason
from tracekit.collectors.display import Display
from tracekit.collectors.dist_manifest import LOGS, build_manifest
from tracekit.collectors.rank import result_name
from tracekit.errors import DeviceError, OutOfMemoryError, TracekitError
from tracekit.io import atomic_dir
from tracekit.manifest import MANIFEST, write_manifest

TENSORBOARD = "tensorboard"
SPEC = ".launch.pickle"  # the run description for the ranks; removed before the rename
TIMEOUT_S = 600.0  # process-group timeout: the longest any collective may wait for a peer
MONITOR_INTERVAL_S = 0.1
WORKER_MODULE = "tracekit.collectors.rank"
# Set in the workers' environment unless the user set them (see the module docstring).
WORKER_ENV_DEFAULTS: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
_HANDLED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # the launcher's defaults


def worker_env(cfg: CollectConfig) -> dict[str, dict[str, str]]:
    """``{name: {"value", "source"}}`` of what the workers get beyond the inherited
    environment: the NVLS switches and ``OMP_NUM_THREADS`` (the CPU's cores shared out,
    as torchrun does), each kept as the user set it (source ``user``)."""
    return worker_env_for(cfg.gpus)


def worker_env_for(nproc: int) -> dict[str, dict[str, str]]:
    """:func:`worker_env` for ``nproc`` workers (``tracekit run --nproc-per-node``)."""
    wanted = dict(WORKER_ENV_DEFAULTS)
    wanted["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    out = {}
    for name, default in wanted.items():
        user = os.environ.get(name)
        out[name] = {
            "value": default if user is None else user,
            "source": "tracekit" if user is None else "user",
        }
    return out


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` while the workers start (they copy it); restored
    after, with whatever the launcher set in it."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _signal_handlers() -> Iterator[None]:
    """The launcher installs handlers that raise SignalException and never restores them."""
    sigs = [getattr(signal, s) for s in _HANDLED_SIGNALS if hasattr(signal, s)]
    saved = {s: signal.getsignal(s) for s in sigs}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _quiet_launcher() -> Iterator[None]:
    """The launcher logs each failure as a multi-line report; the manifest and one
    error line say it here."""
    prefix = "torch.distributed.elastic"
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(prefix)]
    logs = [logging.getLogger(n) for n in [prefix, *names]]  # torch sets each one's level
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for log, level in zip(logs, levels, strict=True):
            log.setLevel(level)


def _rank_logs(folder: Path) -> Any:
    """A LogsSpecs writing rank R's streams to ``folder/rank<R>.{stdout,stderr}.log``."""
    from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, Std

    class RankLogs(LogsSpecs):
        def __init__(self) -> None:
            super().__init__(log_dir=str(folder), redirects=Std.ALL, tee=Std.NONE)

        @property
        def root_log_dir(self) -> str:
            return str(folder)

        def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
            dest = LogsDest()
            for local_rank, env in envs.items():
                stem = str(folder / f"rank{env['RANK']}")
                dest.stdouts[local_rank] = f"{stem}.stdout.log"
                dest.stderrs[local_rank] = f"{stem}.stderr.log"
                dest.error_files[local_rank] = f"{stem}.error.json"
                env["TORCHELASTIC_ERROR_FILE"] = dest.error_files[local_rank]
            return dest

    return RankLogs()


def launcher_info(cfg: CollectConfig) -> dict[str, Any]:
    return {
        "launcher": "torch.distributed.launcher.api.elastic_launch",
        "rdzv_backend": "c10d",
        "rdzv_endpoint": "localhost:0",
        "max_restarts": 0,
        "monitor_interval_s": MONITOR_INTERVAL_S,
        "worker": f"python -m {WORKER_MODULE}",
        "timeout_s": TIMEOUT_S,
    }


def launch(cfg: CollectConfig, run_dir: Path, env: dict[str, str]) -> dict[int, dict[str, Any]]:
    """Run the ranks to their end; returns the launcher's failures by rank (empty: every
    rank exited 0). Ctrl-C or SIGTERM stop every rank and raise KeyboardInterrupt."""
    spec = {"config": cfg, "run_dir": str(run_dir), "timeout_s": TIMEOUT_S}
    return launch_workers(cfg.gpus, WORKER_MODULE, spec, run_dir, env)


def launch_workers(nproc: int, module: str, spec_data: dict[str, Any], run_dir: Path,
                   env: dict[str, str]) -> dict[int, dict[str, Any]]:  # fmt: skip
    """:func:`launch` of ``nproc`` workers ``python -m module SPEC`` (``SPEC``: the pickled
    ``spec_data``); ``tracekit run --nproc-per-node`` starts its script ranks here."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    (run_dir / LOGS).mkdir()
    spec = run_dir / SPEC
    spec.write_bytes(pickle.dumps(spec_data))
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"tracekit-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=MONITOR_INTERVAL_S,
        logs_specs=_rank_logs(run_dir / LOGS),
    )
    try:
        with _environment(env), _signal_handlers(), _quiet_launcher():
            elastic_launch(config, sys.executable)("-m", module, str(spec))
    except ChildFailedError as e:
        return {
            int(rank): {
                "exitcode": f.exitcode,
                "signal": f.signal_name() if f.exitcode < 0 else None,
                "timestamp": float(f.timestamp),
            }
            for rank, f in e.failures.items()
        }
    except SignalException as e:
        raise KeyboardInterrupt(f"stopped by {e.sigval.name}") from None
    finally:
        spec.unlink(missing_ok=True)
    return {}


def check(cfg: CollectConfig) -> None:
    """What can be checked before anything starts (the ranks check the rest)."""
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"CUDA was requested but is not available (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda}); run with --device cpu"
            )
        n = torch.cuda.device_count()  # no CUDA context in this process
        if cfg.gpus > n:
            raise DeviceError(f"--gpus {cfg.gpus} but only {n} CUDA device(s) are visible")
        if not torch.distributed.is_nccl_available():
            raise DeviceError("--gpus needs NCCL, and this torch build has none")
    elif not torch.distributed.is_gloo_available():
        raise DeviceError("--gpus on CPU needs the gloo backend, and this torch build has none")
    if cfg.compile:
        reason = compile_unsupported_reason(torch.device(cfg.device))
        if reason:
            from tracekit.errors import UsageError

            raise UsageError(f"--compile: {reason}")


def remove_partial_files(run_dir: Path) -> list[str]:
    """Delete what ranks stopped mid-write left: their files are written under a temporary
    name ``.rank<R>...`` and renamed, and a rank the launcher kills cannot clean up."""
    removed = []
    for p in sorted(run_dir.glob(".rank*")):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p.name)
    return removed


def _read_results(run_dir: Path, n: int) -> dict[int, dict[str, Any] | None]:
    out: dict[int, dict[str, Any] | None] = {}
    import json

    for r in range(n):
        path = run_dir / result_name(r)
        try:
            out[r] = json.loads(path.read_text())
        except (OSError, ValueError):
            out[r] = None
        path.unlink(missing_ok=True)
    return out


def collect(cfg: CollectConfig) -> Path:
    """``tracekit collect``: ``cfg`` on one process per GPU (``--gpus`` > 1) or in this
    process (:func:`tracekit.collectors.collect.collect`); returns the run folder."""
    return collect_distributed(cfg) if cfg.gpus > 1 else collect_single(cfg)


def collect_distributed(cfg: CollectConfig) -> Path:
    """Run ``cfg`` on ``cfg.gpus`` processes and write one run folder; returns its path."""
    check(cfg)
    out: Path = cfg.out_dir()
    env = worker_env(cfg)
    ui = Display(cfg.quiet)
    with ui.running(), atomic_dir(out) as tmp:
        (tmp / TENSORBOARD).mkdir()
        ui.phase(f"training on {cfg.gpus} processes ({cfg.parallel}); logs in {out}/{LOGS}")
        failures = launch(cfg, tmp, {k: v["value"] for k, v in env.items()})
        remove_partial_files(tmp)
        results = _read_results(tmp, cfg.gpus)
        manifest = build_manifest(
            cfg, results, failures, env=env, launcher=launcher_info(cfg), log_dir=tmp / LOGS
        )
        ui.phase("writing manifest")
        write_manifest(tmp / MANIFEST, manifest)
    status, error = manifest["status"], manifest["error"]
    if status == "oom":
        raise OutOfMemoryError(
            f"{error} (--gpus {cfg.gpus} --parallel {cfg.parallel} --batch {cfg.batch} per "
            f"rank --seq {cfg.seq}); {out}/{MANIFEST} has status 'oom'"
        )
    if status != "ok":
        raise TracekitError(f"collect failed: {error} ({out}/{MANIFEST} has status 'error')")
    return out

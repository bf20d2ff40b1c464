"""One rank of ``tracekit run --nproc-per-node N``:
``python -m tracekit.collectors.script_rank SPEC``.

``collectors/script_dist.py`` starts one such process per rank through the launcher of
``collect --gpus N`` (``collectors/distributed.py``: torch's elastic launcher, so the
script finds the environment ``torchrun`` gives it: ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ...). ``SPEC`` is the
pickled run description the parent wrote. A rank:

1. runs the script as ``tracekit run`` does (``collectors/script.py``: the same session,
   schedule and step marker), its session writing into a private folder
   ``.rank<R>.session`` of the run folder; ceilings are measured by rank 0 only;
2. after the schedule, the measured communication cost over the script's next steps
   (``collectors/script_comm.py``), then stops the script;
3. moves its files into the run folder under ``rank<R>.``-prefixed names (as ``collect``'s
   ranks name theirs), its own manifest to ``logs/rank<R>.manifest.json`` (artifacts
   renamed, with its ``comm_cost``), and writes ``rank<R>.result.json`` for the parent.

A rank whose script fails (or whose tracekit work fails) exits non-zero as soon as its
result is written, so that the launcher stops the others; its script's traceback is in
``logs/rank<R>.stderr.log``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.dist_manifest import LOGS
from tracekit.collectors.rank import _watch_parent, file_prefix, initial_result, result_name
from tracekit.io import atomic_write_json
from tracekit.manifest import MANIFEST, write_manifest

SKIP = ("tensorboard",)  # one logdir per run folder, not per rank


def session_dir(run_dir: Path, rank: int) -> Path:
    """Where rank ``rank``'s session builds its folder (removed once its files moved)."""
    return run_dir / f".rank{rank}.session"


def rank_manifest_name(rank: int) -> str:
    return f"{LOGS}/rank{rank}.manifest.json"


def prefixed_artifacts(arts: dict[str, Any], names: set[str], prefix: str) -> dict[str, Any]:
    """``artifacts`` with every file name among ``names`` (the session folder's files)
    renamed ``prefix + name``; words (``*_absent``, the pass names) as they are."""

    def rename(v: Any) -> Any:
        if isinstance(v, str) and v in names:
            return prefix + v
        if isinstance(v, list):
            return [rename(x) for x in v]
        return v

    return {k: rename(v) for k, v in arts.items()}


def move_files(src: Path, run_dir: Path, prefix: str) -> set[str]:
    """The session folder's files into ``run_dir`` as ``prefix + name``; returns the
    names moved (the manifest and the per-run logdir stay behind)."""
    moved: set[str] = set()
    for p in sorted(src.iterdir()):
        if p.name == MANIFEST or p.name in SKIP:
            continue
        p.rename(run_dir / (prefix + p.name))
        moved.add(p.name)
    return moved


def _log_for(rank: int) -> Any:
    def log(text: str) -> None:
        print(f"tracekit: rank {rank}: {text}", file=sys.stderr, flush=True)

    return log


def _backend() -> str | None:
    import torch.distributed as dist

    return str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None


def _run(spec: dict[str, Any], rank: int, result: dict[str, Any]) -> int:
    """Run the script on this rank; fills ``result``; returns the rank's exit code."""
    from tracekit.collectors.script import run_script
    from tracekit.collectors.script_comm import CommHook

    cfg = spec["run"]
    run_dir = Path(spec["run_dir"])
    session = dataclasses.replace(
        cfg.session,
        out=session_dir(run_dir, rank),
        ceilings=cfg.session.ceilings and rank == 0,
        counters=False,
        # cuda: this rank's GPU, the one its optimizer's parameters are on (the script
        # picks it; at the session's start the current device is still cuda:0)
        device="auto" if cfg.session.device == "cuda" else cfg.session.device,
    )
    log = _log_for(rank)
    sweep: Callable[[torch.device], dict[str, Any]] | None = None
    if cfg.session.ceilings and int(os.environ["WORLD_SIZE"]) > 1:  # rank 0's in ceilings
        from tracekit.collectors.interconnect import measure_interconnect

        sweep = measure_interconnect
    hook = CommHook(rank, rounds=spec["comm_rounds"], steps=spec["comm_steps"],
                    run_on=not cfg.stop_after, interconnect=sweep, log=log)  # fmt: skip
    res = run_script(dataclasses.replace(cfg, session=session), log=log, after_step=hook)
    hook.ended(res.steps)
    if res.traceback:
        sys.stderr.write(res.traceback)
    if res.message:  # its folder is logs/rank<R>.manifest.json once the files moved
        log(res.message.replace(f"{res.run_dir}/{MANIFEST}", rank_manifest_name(rank)))
    result["backend"] = hook.backend or _backend()  # (a script may destroy its group)
    result["parallel"] = hook.parallel
    result["comm_cost"] = hook.entry
    result["interconnect"], result["interconnect_absent"] = hook.sweep, hook.sweep_absent
    _collect_files(res.run_dir, run_dir, rank, res.manifest, result)
    result["status"] = res.status
    result["exit_code"] = res.exit_code
    if res.status in ("error", "oom"):
        result["failed_at"] = time.time()
    if res.status in ("error", "oom"):  # non-zero: the launcher stops the others
        return res.exit_code or 1
    # incomplete: every rank's loop ended early; its result says so (a non-zero exit would
    # make the launcher stop ranks still writing theirs)
    return 0 if res.status == "incomplete" else res.exit_code


def _collect_files(src: Path, run_dir: Path, rank: int, manifest: dict[str, Any],
                   result: dict[str, Any]) -> None:  # fmt: skip
    """The rank's session folder into the run folder (module docstring, step 3)."""
    prefix = file_prefix(rank)
    moved = move_files(src, run_dir, prefix)
    m = dict(manifest)
    m["artifacts"] = prefixed_artifacts(m.get("artifacts") or {}, moved, prefix)
    m["artifacts"].pop("tensorboard", None)
    m["comm_cost"] = result["comm_cost"]
    m["rank"] = rank
    write_manifest(run_dir / rank_manifest_name(rank), m)
    shutil.rmtree(src, ignore_errors=True)
    for k in ("error", "device", "metrics", "artifacts", "total_steps", "versions"):
        result[k] = m.get(k)
    result["manifest"] = rank_manifest_name(rank)
    result["phase"] = "done"


def _finish(ok: bool) -> None:
    """After a complete rank: every rank here before the group goes (when the script left
    it up), then the process ends without interpreter teardown (collectors/rank.py)."""
    if ok and _backend() is not None:
        import torch
        import torch.distributed as dist

        from tracekit.collectors.interconnect import barrier_on

        # NCCL: one GPU per rank, LOCAL_RANK's as torchrun's convention has it (the script
        # may never have made it current)
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local) if _backend() == "nccl" else None
        with contextlib.suppress(Exception):  # a peer already gone: its result says why
            barrier_on(device)
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    spec = pickle.loads(Path(args[0]).read_bytes())
    run_dir = Path(spec["run_dir"])
    rank = int(os.environ["RANK"])
    os.chdir(spec["cwd"])
    _watch_parent()
    result = initial_result("script")
    code = 1
    try:
        code = _run(spec, rank, result)
    except Exception as e:  # tracekit's own failure around the script: recorded, then exit
        result["failed_at"] = time.time()
        result["status"] = "error"
        lines = str(e).strip().splitlines()
        result["error"] = f"{type(e).__name__}: {lines[0] if lines else ''}".strip()
        traceback.print_exc()  # into logs/rank<R>.stderr.log
        code = 1
    atomic_write_json(run_dir / result_name(rank), result)
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0:
        _finish(result["status"] == "ok")
    os._exit(code)


def read_rank_manifest(run_dir: Path, rank: int) -> dict[str, Any] | None:
    try:
        m = json.loads((run_dir / rank_manifest_name(rank)).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


if __name__ == "__main__":
    main()

"""One rank of a multi-GPU ``tracekit collect``: ``python -m tracekit.collectors.rank SPEC``.

``collectors/distributed.py`` starts one such process per GPU through torch's elastic
launcher, which sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``; ``SPEC`` is the pickled run description the parent wrote. A rank:

1. binds its GPU (``cuda:<LOCAL_RANK>``) and joins the process group (NCCL, gloo on
   CPU) *before* the profiler starts, so Kineto writes ``distributedInfo`` in its trace;
2. with ceilings on: rank 0 measures the device ceilings while the others wait, then all
   ranks measure the interconnect (``collectors/interconnect.py``);
3. runs the single-GPU phases (``collectors/collect.py``) on its model replica (DDP) or shard
   (FSDP2), on its own batches (seed + rank), writing ``rank<R>.``-prefixed files, with
   the measured communication cost (``collectors/commcost.py``) between the timed steps
   and the profiled passes;
4. writes ``rank<R>.result.json`` (status, metrics, artifacts) for the parent to merge,
   and never ``manifest.json``.

A rank that fails writes its result with status ``error``/``oom`` and the time it failed,
then exits at once (no teardown that could wait on its peers); the launcher then stops the
others. A rank whose parent disappears exits within a second (it runs in a session of its
own, so nothing else would stop it).
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.ceilings import measure_ceilings
from tracekit.collectors.collect import (
    _one_line,
    _workload,
    base_manifest,
    device_info,
    precisions_used,
    versions,
)
from tracekit.collectors.commcost import measure as measure_comm
from tracekit.collectors.config import CollectConfig, resolve_device, torch_dtype
from tracekit.collectors.display import Display
from tracekit.collectors.faults import fault_hook
from tracekit.collectors.interconnect import measure_interconnect
from tracekit.collectors.train import Workload
from tracekit.io import atomic_write_json

# A test hook: "<ranks>:<step>:<action>" makes those ranks ('*' or a comma list) fail at
# the forward of global step <step>: raise (RuntimeError), oom (torch.OutOfMemoryError),
# hang (sleep; writes rank<R>.pid into
# TRACEKIT_TEST_FAULT_DIR first, so a test knows when to interrupt).


def result_name(rank: int) -> str:
    return f"rank{rank}.result.json"


def file_prefix(rank: int) -> str:
    """The start of every file name a rank writes."""
    return f"rank{rank}."


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def parallel_info(cfg: CollectConfig) -> dict[str, Any]:
    """How :func:`wrap_model` wraps the model (for the manifest)."""
    if cfg.parallel == "ddp":
        return {
            "wrapper": "torch.nn.parallel.DistributedDataParallel",
            "bucket_cap_mb": 25,
            "gradient_as_bucket_view": False,
            "find_unused_parameters": False,
            "broadcast_buffers": True,
        }
    mp = torch_dtype(cfg.dtype) if cfg.dtype != "fp32" else None
    return {
        "wrapper": "torch.distributed.fsdp.fully_shard (FSDP2)",
        "units": "each transformer block, then the root (embeddings, final norm, head)",
        "reshard_after_forward": True,
        "mp_policy": {
            "param_dtype": str(mp).removeprefix("torch.") if mp else None,
            "reduce_dtype": "float32",
        },
        "note": "autocast stays on as on one GPU; parameters are all-gathered in param_dtype",
    }


def wrap_model(
    cfg: CollectConfig, device: torch.device
) -> Callable[[torch.nn.Module], torch.nn.Module]:
    """The DDP or FSDP2 wrapping of this rank's model, as :func:`parallel_info` says."""
    if cfg.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        return lambda m: DDP(m, device_ids=ids, bucket_cap_mb=25)

    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtype = torch_dtype(cfg.dtype) if cfg.dtype != "fp32" else None
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    def shard(m: torch.nn.Module) -> torch.nn.Module:
        for block in m.blocks:  # type: ignore[union-attr]
            fully_shard(block, mp_policy=mp, reshard_after_forward=True)
        fully_shard(m, mp_policy=mp, reshard_after_forward=True)
        return m

    return shard


def _watch_parent() -> None:
    """Exit when the launching process is gone (this rank runs in its own session)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="tracekit-parent-watch", daemon=True).start()


def rank_manifest_entries(cfg: CollectConfig, device: torch.device) -> dict[str, Any]:
    """What a rank's result holds of the one-GPU manifest before its phases fill them, built
    by the same function (``base_manifest``): ``artifacts`` (without ``tensorboard``: one
    logdir per run, not per rank) and ``profiler`` (the passes write their descriptions
    in it, e.g. the light timeline pass's ``profiler.timeline``)."""
    base = base_manifest(cfg, device)
    base["artifacts"].pop("tensorboard", None)
    return {"artifacts": base["artifacts"], "profiler": base["profiler"]}


def _run(
    cfg: CollectConfig,
    run_dir: Path,
    timeout_s: float,
    rank: int,
    local_rank: int,
    result: dict[str, Any],
) -> None:
    import torch.distributed as dist

    if cfg.device == "cuda" and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    device = resolve_device(cfg)
    result["device"] = device_info(device)
    result["phase"] = "init_process_group"
    dist.init_process_group(
        backend_for(device.type),
        timeout=timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    if rank == 0:
        result["versions"] = versions(device)
        if device.type == "cuda":
            nccl = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            result["versions"]["nccl"] = ".".join(map(str, nccl))
    if cfg.ceilings:
        result["phase"] = "ceilings"
        if rank == 0:
            result["ceilings"] = measure_ceilings(device, precisions_used(cfg)).to_dict()
        dist.barrier()
        result["phase"] = "interconnect"
        interconnect = measure_interconnect(device)
        if rank == 0:
            result["interconnect"] = interconnect
    result["phase"] = "workload"
    result.update(rank_manifest_entries(cfg, device))
    wrap, fault = wrap_model(cfg, device), fault_hook(rank)

    def wrapped(m: torch.nn.Module) -> torch.nn.Module:
        if fault is not None:
            fault(m)
        return wrap(m)

    def comm_cost(wl: Workload, n: int) -> int:
        """The measured communication cost (``collectors/commcost.py``), unprofiled."""
        result["phase"] = "comm_cost"
        result["comm_cost"], n = measure_comm(wl.model, wl.step, device, rank=rank,
                                              rounds=cfg.comm_rounds, steps=cfg.comm_steps,
                                              start=n)  # fmt: skip
        result["phase"] = "workload"
        return n

    _workload(
        cfg.replace(ceilings=False),
        device,
        run_dir,
        Display(quiet=True),
        result,
        prefix=file_prefix(rank),
        wrap=wrapped,
        data_seed=cfg.seed + rank,
        after_timed=comm_cost,
    )


def initial_result(phase: str, **more: Any) -> dict[str, Any]:
    """A rank's result before it has run anything (status error until it ends well): who
    it is, from the launcher's environment, and ``more`` keys of the worker's own."""
    return {
        "rank": int(os.environ["RANK"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "status": "error",
        "error": None,
        "failed_at": None,
        "phase": phase,
        "device": None,
        "metrics": None,
        "artifacts": None,
        **more,
        "comm_cost": None,
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    spec = pickle.loads(Path(args[0]).read_bytes())
    cfg: CollectConfig = spec["config"]
    run_dir = Path(spec["run_dir"])
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    _watch_parent()
    result = initial_result("start", profiler=None)
    try:
        _run(cfg, run_dir, float(spec["timeout_s"]), rank, local_rank, result)
        result["status"] = "ok"
    except Exception as e:  # recorded for the parent; this process then ends at once
        result["failed_at"] = time.time()
        result["status"] = "oom" if isinstance(e, torch.OutOfMemoryError) else "error"
        result["error"] = _one_line(e)
        traceback.print_exc()  # into logs/rank<R>.stderr.log
    atomic_write_json(run_dir / result_name(rank), result)
    ok = result["status"] == "ok"
    if ok:
        import torch.distributed as dist

        dist.barrier()  # nobody tears the group down while a peer still uses it
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: after a failure it could wait on peers in a collective, and
    # after success it only costs seconds (torch's, gloo's destructors); the result is
    # written and synced.
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""``tracekit run --nproc-per-node N -- python train.py ARGS``: the script on N ranks.

The parent (this module) runs no script. It starts N ranks (``python -m
tracekit.collectors.script_rank``, ``collectors/script_rank.py``) through ``collect --gpus
N``'s launcher (``collectors/distributed.py``: torch's elastic launcher, as ``torchrun
--standalone`` starts a job: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT`` of a c10d rendezvous on a free local port; NVLink
multicast off unless the user set its switches; ``OMP_NUM_THREADS`` the cores shared out;
each rank's output in ``logs/rank<R>.{stdout,stderr}.log``; the first rank that fails
stops the others). Every rank runs ``tracekit run``'s schedule on the script, then the
measured communication cost (``collectors/script_comm.py``), and leaves its files under
``rank<R>.`` names. The parent then writes the run folder's ``manifest.json`` from the
ranks' results (:func:`build_manifest`): rank 0's manifest as the base, the metrics across
ranks, and ``collect --gpus N``'s ``distributed`` block (per-rank entries, the measured
``comm_cost``), so ``tracekit report`` reads the folder as a ``collect --gpus N`` one.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracekit.collectors import commcost
from tracekit.collectors.dist_manifest import (
    LOGS,
    _top_artifacts,
    first_failure,
    mark_terminated,
    rank_entry,
)
from tracekit.collectors.distributed import (
    MONITOR_INTERVAL_S,
    TENSORBOARD,
    _read_results,
    launch_workers,
    remove_partial_files,
    worker_env_for,
)
from tracekit.collectors.light_cost import overhead, worst_cost
from tracekit.collectors.script import RunConfig, RunResult, parse_command
from tracekit.collectors.script_rank import read_rank_manifest
from tracekit.errors import DeviceError, UsageError
from tracekit.io import atomic_dir
from tracekit.manifest import MANIFEST, write_manifest

WORKER_MODULE = "tracekit.collectors.script_rank"
ACROSS_RANKS = (
    "step time: the slowest rank's (largest median); samples, tokens and model FLOP/s: "
    "every rank's per step over that step; peaks: the largest rank's; average memory: "
    "mean of the ranks'; profiled and light-pass steps: largest median over ranks"
)


def launcher_info() -> dict[str, Any]:
    return {
        "launcher": "torch.distributed.launcher.api.elastic_launch",
        "rdzv_backend": "c10d",
        "rdzv_endpoint": "localhost:0",
        "max_restarts": 0,
        "monitor_interval_s": MONITOR_INTERVAL_S,
        "worker": f"python -m {WORKER_MODULE}",
        "timeout_s": None,  # the script's own init_process_group sets its timeout
    }


def _stat(values: list[Any], fn: Callable[[list[float]], float]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return fn(vals) if vals else None


def _rate(per_rank: list[Mapping[str, Any]], key: str, medians: list[float],
          t_ms: float) -> float | None:  # fmt: skip
    """Every rank's per-step amount (its rate x its own median step) over ``t_ms``: the
    job's rate when each step waits for the slowest rank."""
    total = 0.0
    for m, med in zip(per_rank, medians, strict=True):
        v = m.get(key)
        if v is None:
            return None
        total += float(v) * med
    return total / t_ms


def _slowest(per_rank: list[Mapping[str, Any]], key: str) -> int | None:
    got = [(float(m[key]["median"]), -r) for r, m in enumerate(per_rank) if m.get(key)]
    return -max(got)[1] if got else None


def merge_metrics(per_rank: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The top-level ``metrics`` of N ranks' ``tracekit run`` metrics (:data:`ACROSS_RANKS`)."""
    n = len(per_rank)
    medians = [float(m["step_time_ms"]["median"]) for m in per_rank]
    slow = max(range(n), key=lambda r: (medians[r], -r))
    t = medians[slow]
    out = dict(per_rank[slow])
    for key in ("samples_per_s", "tokens_per_s", "model_flops_per_s"):
        out[key] = _rate(per_rank, key, medians, t)
    out["tokens_per_s_per_gpu"] = out["tokens_per_s"] / n if out["tokens_per_s"] else None
    peaks = [m.get("peak_allocated_bytes") for m in per_rank]
    have = [p for p in peaks if p is not None]
    out["peak_allocated_bytes"] = max(have) if have else None
    out["peak_reserved_bytes"] = _stat([m.get("peak_reserved_bytes") for m in per_rank], max)
    out["avg_allocated_bytes"] = _stat(
        [m.get("avg_allocated_bytes") for m in per_rank], statistics.fmean
    )
    for key, stats, pct in (
        ("profiled_step_time_ms", "profiled_step_time", "profiler_overhead_pct"),
        ("timeline_step_time_ms", "timeline_step_time", "timeline_overhead_pct"),
    ):
        r = _slowest(per_rank, stats)
        if r is not None:
            out[stats] = dict(per_rank[r][stats])
            out[key] = per_rank[r][stats]["median"]
            out[pct] = (float(out[key]) / t - 1.0) * 100
    out.update(overhead(worst_cost(per_rank), out.get("timeline_step_time_ms"), t))
    out.update(
        world_size=n,
        slowest_rank=slow,
        step_time_median_ms_by_rank=medians,
        step_time_skew_pct=(max(medians) / min(medians) - 1.0) * 100,
        peak_allocated_rank=peaks.index(max(have)) if have else None,
        across_ranks=ACROSS_RANKS,
    )
    return out


def _status(ranks: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The run's status: the first failed rank's, else the first rank that did not
    complete (``incomplete``), else ``ok``; the error names the rank."""
    first = first_failure(ranks)
    if first is not None:
        return first["status"], f"rank {first['rank']}: {first['error']}"
    other = next((r for r in ranks if r["status"] != "ok"), None)
    if other is not None:
        return "incomplete", f"rank {other['rank']}: {other['error']}"
    return "ok", None


def _per_step(manifests: list[dict[str, Any] | None], key: str) -> int | None:
    total = 0
    for m in manifests:
        v = ((m or {}).get("config") or {}).get(key)
        if v is None:
            return None
        total += int(v)
    return total if manifests else None


def _schedule(m: dict[str, Any], cost: Mapping[str, Any]) -> None:
    """The communication-cost steps after ``run``'s schedule (when they ran)."""
    done = m.get("schedule_steps")
    if not done or cost.get("status") != "ok":
        return
    extra = 2 * int(cost["rounds"]) * int(cost["steps_per_round"])
    m["schedule"] = [*(m.get("schedule") or []),
                     {"phase": "comm_cost", "steps": [done + 1, done + extra]}]  # fmt: skip
    m["schedule_steps"] = done + extra


def build_manifest(cfg: RunConfig, nproc: int, results: Mapping[int, Mapping[str, Any] | None],
                   failures: Mapping[int, Mapping[str, Any]],
                   manifests: list[dict[str, Any] | None], *, env: Mapping[str, Any],
                   rounds: int, steps: int, log_dir: Path | None = None,
                   ) -> dict[str, Any]:  # fmt: skip
    """The run folder's manifest: rank 0's manifest (else the first rank's that wrote
    one) with the run's status, metrics across ranks, the ranks' artifacts and the
    ``distributed`` block."""
    ranks = [rank_entry(r, results.get(r), failures.get(r), log_dir) for r in range(nproc)]
    mark_terminated(ranks)
    for r, e in enumerate(ranks):
        e["manifest"] = (results.get(r) or {}).get("manifest")
    base = next((m for m in manifests if m), None)
    m: dict[str, Any] = dict(base) if base else _bare(cfg)
    m.pop("comm_cost", None)
    m.pop("rank", None)
    m["status"], m["error"] = _status(ranks)
    ok = m["status"] == "ok"
    m["metrics"] = merge_metrics([e["metrics"] for e in ranks]) if ok else None
    m["artifacts"] = {**(m.get("artifacts") or {}), **_top_artifacts(ranks)}
    m["config"] = {**(m.get("config") or {}), "nproc_per_node": nproc,
                   "comm_rounds": rounds, "comm_steps": steps}  # fmt: skip
    m["command"], m["pid"] = list(sys.argv), os.getpid()
    rank0 = results.get(0) or {}
    if m.get("ceilings") and rank0.get("interconnect"):  # as collect --gpus N keeps it
        m["ceilings"] = {**m["ceilings"], "interconnect": rank0["interconnect"]}
    cost = commcost.combine({r: (res or {}).get("comm_cost") for r, res in results.items()},
                            nproc, rounds=rounds, steps=steps)  # fmt: skip
    _schedule(m, cost)
    reporting = [res for r in range(nproc) if (res := results.get(r))]
    parallel = next((res.get("parallel") for res in reporting if res.get("parallel")), None)
    samples, tokens = (
        _per_step(manifests, "samples_per_step"),
        _per_step(manifests, "tokens_per_step"),
    )
    first = first_failure(ranks)
    m["distributed"] = {
        "world_size": nproc,
        "nnodes": 1,
        "nproc_per_node": nproc,
        "backend": next((res["backend"] for res in reporting if res.get("backend")), None),
        "parallel": parallel,
        **launcher_info(),
        "global_batch": samples,
        "per_rank_batch": ((manifests[0] or {}).get("config") or {}).get("samples_per_step")
        if manifests else None,
        "global_tokens_per_step": tokens,
        "data": "the script's own: each rank loads what the script gives it",
        "wrapping": {"wrapper": (m.get("model") or {}).get("class"),
                     "found": "the module holding the optimizer's parameters (rank 0's)"},
        "env": dict(env),
        "failed_rank": first["rank"] if first else None,
        "ranks": ranks,
        "comm_cost": cost,
    }  # fmt: skip
    return m


def _bare(cfg: RunConfig) -> dict[str, Any]:
    """The manifest's base when no rank wrote one (every rank failed before its end)."""
    cmd = parse_command(cfg.command)
    return {
        "workload": "script",
        "config": {**cfg.session.to_dict(), **cfg.to_dict()},
        "metrics": None,
        "device": None,
        "versions": None,
        "ceilings": None,
        "artifacts": {},
        "total_steps": None,
        "script": {**cmd.describe(), "ended": None, "exit_code": None, "stopped_at_step": None},
    }


def _cleanup(run_dir: Path) -> None:
    """What ranks stopped mid-way left: ``.rank*`` files and their sessions' folders."""
    remove_partial_files(run_dir)
    for p in run_dir.glob("..rank*"):
        shutil.rmtree(p, ignore_errors=True)


def run_distributed(cfg: RunConfig, nproc: int, *, rounds: int, steps: int,
                    log: Callable[[str], None] | None = None) -> RunResult:  # fmt: skip
    """Run the script on ``nproc`` ranks and write one run folder (module docstring)."""
    if nproc < 1:
        raise UsageError(f"--nproc-per-node must be >= 1, got {nproc}")
    if rounds < 0 or steps < 1:
        raise UsageError("--comm-rounds must be >= 0 and --comm-steps >= 1")
    parse_command(cfg.command)  # a bad command line: one line, nothing started
    if cfg.session.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise DeviceError("--device cuda but CUDA is not available; use --device cpu")
    out = cfg.session.out
    env = worker_env_for(nproc)
    spec = {"run": cfg, "comm_rounds": rounds, "comm_steps": steps, "cwd": os.getcwd()}
    with atomic_dir(out) as tmp:
        (tmp / TENSORBOARD).mkdir()
        if log is not None and not cfg.session.quiet:
            log(f"running the script on {nproc} processes; logs in {out}/{LOGS}")
        failures = launch_workers(nproc, WORKER_MODULE, {**spec, "run_dir": str(tmp)}, tmp,
                                  {k: v["value"] for k, v in env.items()})  # fmt: skip
        _cleanup(tmp)
        results = _read_results(tmp, nproc)
        manifests = [read_rank_manifest(tmp, r) for r in range(nproc)]
        manifest = build_manifest(cfg, nproc, results, failures, manifests, env=env,
                                  rounds=rounds, steps=steps, log_dir=tmp / LOGS)  # fmt: skip
        write_manifest(tmp / MANIFEST, manifest)
    return result_of(out, manifest, results)


def result_of(out: Path, m: dict[str, Any], results: Mapping[int, Any]) -> RunResult:
    """What ``tracekit run`` prints and exits with: one line naming the failed rank."""
    status = m["status"]
    res = RunResult(out, status, 0, manifest=m, steps=int(m.get("total_steps") or 0))
    where = f"{out}/{MANIFEST} has status '{status}'"
    if status == "ok":
        return res
    failed = m["distributed"]["failed_rank"]
    rank = failed if failed is not None else _first_not_ok(m)
    logs = f"{out}/{LOGS}/rank{rank}.stderr.log"
    entry = m["distributed"]["ranks"][rank] if rank is not None else {}
    got = results.get(rank) if rank is not None else None
    code = (got or {}).get("exit_code") or entry.get("exitcode")  # else the launcher's
    res.exit_code = int(code) if code and code > 0 else (2 if status == "incomplete" else 1)
    res.is_error = True
    res.message = f"{m['error']} ({where}; rank {rank}'s output: {logs})"
    return res


def _first_not_ok(m: Mapping[str, Any]) -> int | None:
    return next((r["rank"] for r in m["distributed"]["ranks"] if r["status"] != "ok"), None)

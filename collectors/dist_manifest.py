"""The manifest of a multi-GPU run, merged by the parent from the ranks' result files.

Pure functions of the ranks' results (``collectors/rank.py`` writes them) and the
launcher's failures; docs/collect.md, *Multi-GPU*, is the contract they implement.

Across ranks, the top-level ``metrics`` keep the single-GPU keys, so tools that read one
run's metrics read these too:

* step time: the slowest rank's statistics (the rank with the largest median unprofiled
  step time: in data-parallel training every rank waits for it), named in
  ``slowest_rank``; ``step_time_skew_pct`` = (largest - smallest median) / smallest;
* throughput: the global batch (N x ``--batch``) per slowest-rank step, and per GPU;
* memory: peaks are the largest rank's (named), the average is the mean of the ranks';
* profiled step time and the light timeline pass's: the largest median over ranks; the
  overheads are against the step time above; ``final_loss``: the mean of the ranks' last
  losses (the global batch's loss).

A run fails with the first rank that failed (its result's ``failed_at``, else the time
the launcher saw it exit): status ``oom`` or ``error``, ``error`` = ``rank R: <message>``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.commcost import combine
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.gpt import train_flops_per_token
from tracekit.collectors.light_cost import overhead, worst_cost
from tracekit.collectors.rank import backend_for, parallel_info

LOGS = "logs"
RANK_ARTIFACTS = (
    "trace",
    "traces",
    "memory_timeline",
    "memory_timeline_absent",
    "memory_timeline_pass",
    "timeline_trace",
    "timeline_traces",
    "timeline_trace_absent",
    "timeline_steps",
    "profiler_flops",
    "memory_snapshot",
    "memory_snapshot_absent",
)
TOP_FROM_RANK0 = (
    "trace",
    "memory_timeline",
    "memory_timeline_absent",
    "memory_timeline_pass",
    "timeline_trace",
    "timeline_trace_absent",
    "timeline_steps",
    "profiler_flops",
    "memory_snapshot",
    "memory_snapshot_absent",
)
ACROSS_RANKS = (
    "step time: the slowest rank's (largest median); throughput: global batch per that "
    "step; peaks: the largest rank's; average memory: mean of the ranks'; profiled step and "
    "light timeline pass step: largest median over ranks; final loss: mean of the ranks'"
)


def _last_line(path: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else None


def rank_entry(
    rank: int,
    result: Mapping[str, Any] | None,
    failure: Mapping[str, Any] | None,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """One element of ``distributed.ranks``: the rank's result, or what the launcher saw."""
    logs = {"stdout": f"{LOGS}/rank{rank}.stdout.log", "stderr": f"{LOGS}/rank{rank}.stderr.log"}
    e: dict[str, Any] = {
        "rank": rank,
        "local_rank": rank,
        "host": None,
        "pid": None,
        "status": "terminated",
        "error": None,
        "phase": None,
        "failed_at": None,
        "exitcode": failure["exitcode"] if failure else None,
        "signal": failure["signal"] if failure else None,
        "device": None,
        "metrics": None,
        "artifacts": None,
        "total_steps": None,
        "comm_cost": None,  # this rank's measured communication cost (collectors/commcost.py)
        "observer": None,  # this rank's residual check and what the passes left behind
        "logs": logs,
    }
    if result is not None:
        for k in (
            "local_rank",
            "host",
            "pid",
            "status",
            "error",
            "phase",
            "failed_at",
            "device",
            "metrics",
            "total_steps",
            "observer",
        ):
            e[k] = result.get(k)
        arts = result.get("artifacts")
        e["artifacts"] = {k: arts.get(k) for k in RANK_ARTIFACTS} if arts else None
        cost = result.get("comm_cost") or {}
        e["comm_cost"] = cost["ranks"][0] if cost.get("ranks") else None
    if failure is None:
        if result is None:
            e["error"] = "stopped by the launcher after another rank failed"
        return e
    how = f"signal {failure['signal']}" if failure["signal"] else f"exit code {failure['exitcode']}"
    if result is None:
        tail = _last_line(log_dir / f"rank{rank}.stderr.log") if log_dir else None
        e["status"] = "error"
        e["error"] = f"exited with {how} before writing its result" + (f" ({tail})" if tail else "")
        e["failed_at"] = failure["timestamp"]
    elif e["status"] == "ok":  # finished, then failed on the way out
        e["status"] = "error"
        e["error"] = f"exited with {how} after finishing its work"
        e["failed_at"] = failure["timestamp"]
    return e


def mark_terminated(ranks: list[dict[str, Any]]) -> None:
    """A rank that wrote no result and ended by SIGTERM, the launcher's stop signal, while
    another rank failed on its own, was stopped because of that rank: ``terminated``."""

    def stopped(r: dict[str, Any]) -> bool:
        return (
            r["status"] == "error"
            and r["signal"] == "SIGTERM"
            and r["metrics"] is None
            and r["phase"] is None
        )

    if not any(r["status"] in ("error", "oom") and not stopped(r) for r in ranks):
        return
    for r in ranks:
        if stopped(r):
            r["status"] = "terminated"
            r["error"] = "stopped by the launcher (SIGTERM) after another rank failed"
            r["failed_at"] = None


# What a rank's collective raises when a peer is gone (gloo's TCP pairs, NCCL): that
# rank's failure is a consequence of its peer's.
PEER_LOST = (
    "Connection reset by peer",
    "Connection closed by peer",
    "remote process exited or there was a network error",
    "NCCL communicator was aborted",
)


def lost_a_peer(rank: Mapping[str, Any]) -> bool:
    """Whether ``rank`` failed because a peer went away (a message of :data:`PEER_LOST`)."""
    return any(p in str(rank.get("error") or "") for p in PEER_LOST)


def first_failure(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank whose failure ended the run: the first by time (then rank) of those that
    did not fail only because a peer went away. Times alone cannot tell: the launcher
    stamps a rank that exits without a result to the whole second (torch's elastic
    agent), so its peer's "Connection reset by peer" can carry an earlier time."""
    failed = [r for r in ranks if r["status"] in ("error", "oom")]
    if not failed:
        return None
    causes = [r for r in failed if not lost_a_peer(r)] or failed
    return min(causes, key=lambda r: (r["failed_at"] is None, r["failed_at"] or 0.0, r["rank"]))


def _stat(values: list[float | None], fn: Any) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return fn(vals) if vals else None


def _timeline_across(per_rank: list[Mapping[str, Any]], step_ms: float) -> dict[str, Any]:
    """The light pass's step across ranks: the largest median (None: no light pass); its
    cost: the largest rank's interleaved figure where every rank measured one, else the
    largest median against the unprofiled step."""
    meds = [(float(m["timeline_step_time"]["median"]), r)
            for r, m in enumerate(per_rank) if m.get("timeline_step_time")]  # fmt: skip
    if not meds:
        return {"timeline_step_time_ms": None, "timeline_step_time": None,
                "timeline_overhead_pct": None, "timeline_overhead_basis": None,
                "timeline_cost": None}  # fmt: skip
    v, r = max(meds, key=lambda x: (x[0], -x[1]))
    return {
        "timeline_step_time_ms": v,
        "timeline_step_time": dict(per_rank[r]["timeline_step_time"]),
        **overhead(worst_cost(list(per_rank)), v, step_ms),
    }


def merge_metrics(cfg: CollectConfig, per_rank: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The top-level ``metrics`` of N ranks' metrics (module docstring: how)."""
    n = len(per_rank)
    medians = [float(m["step_time_ms"]["median"]) for m in per_rank]
    slow = max(range(n), key=lambda r: (medians[r], -r))
    t = medians[slow] / 1e3
    global_batch = cfg.batch * cfg.grad_accum * n  # sequences per optimizer step
    prof_medians = [float(m["profiled_step_time"]["median"]) for m in per_rank]
    pslow = max(range(n), key=lambda r: (prof_medians[r], -r))
    peaks = [m.get("peak_allocated_bytes") for m in per_rank]
    have_peaks = [p for p in peaks if p is not None]
    flops = train_flops_per_token(cfg.model_config(), cfg.seq) * global_batch * cfg.seq
    return {
        "step_time_ms": dict(per_rank[slow]["step_time_ms"]),
        "samples_per_s": global_batch / t,
        "tokens_per_s": global_batch * cfg.seq / t,
        "tokens_per_s_per_gpu": global_batch * cfg.seq / t / n,
        "model_flops_per_s": flops / t,
        "peak_allocated_bytes": _stat(peaks, max),
        "peak_reserved_bytes": _stat([m.get("peak_reserved_bytes") for m in per_rank], max),
        "avg_allocated_bytes": _stat(
            [m.get("avg_allocated_bytes") for m in per_rank], statistics.fmean
        ),
        "profiled_step_time_ms": prof_medians[pslow],
        "profiled_step_time": dict(per_rank[pslow]["profiled_step_time"]),
        "profiler_overhead_pct": (prof_medians[pslow] / medians[slow] - 1.0) * 100,
        **_timeline_across(per_rank, medians[slow]),
        "final_loss": statistics.fmean(float(m["final_loss"]) for m in per_rank),
        "memory_method": f"{per_rank[0]['memory_method']}; across ranks: peak = the largest "
        "rank's, average = the mean of the ranks' averages",
        "world_size": n,
        "global_batch": global_batch,
        "slowest_rank": slow,
        "step_time_median_ms_by_rank": medians,
        "step_time_skew_pct": (max(medians) / min(medians) - 1.0) * 100,
        "peak_allocated_rank": peaks.index(max(have_peaks)) if have_peaks else None,
        "across_ranks": ACROSS_RANKS,
    }


def _top_artifacts(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    arts0 = ranks[0]["artifacts"] or {}
    top: dict[str, Any] = {k: arts0.get(k) for k in TOP_FROM_RANK0}
    for key in ("traces", "timeline_traces"):
        top[key] = [t for r in ranks for t in ((r["artifacts"] or {}).get(key) or [])]
    top["tensorboard"] = "tensorboard"
    top["logs"] = LOGS
    return top


def build_manifest(
    cfg: CollectConfig,
    results: Mapping[int, Mapping[str, Any] | None],
    failures: Mapping[int, Mapping[str, Any]],
    *,
    env: Mapping[str, Any],
    launcher: Mapping[str, Any],
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """The run's manifest from every rank's result (None: it wrote none) and the
    launcher's failures by rank."""
    from tracekit.collectors.collect import base_manifest

    n = cfg.gpus
    ranks = [rank_entry(r, results.get(r), failures.get(r), log_dir) for r in range(n)]
    mark_terminated(ranks)
    # The parent has no GPU context: device and versions are rank 0's (else any rank's).
    m = base_manifest(cfg, torch.device("cpu"))
    reporting = [res for r in range(n) if (res := results.get(r))]
    m["device"] = next((res["device"] for res in reporting if res.get("device")), None)
    m["versions"] = next(
        (res["versions"] for res in reporting if res.get("versions")), m["versions"]
    )
    m["profiler"]["activities"] = ["cpu", "cuda"] if cfg.device == "cuda" else ["cpu"]
    m["profiler"]["timeline"] = ((results.get(0) or {}).get("profiler") or {}).get("timeline")
    first = first_failure(ranks)
    if first is None:
        m["status"], m["error"] = "ok", None
        m["metrics"] = merge_metrics(cfg, [r["metrics"] for r in ranks])
    else:
        m["status"] = first["status"]
        m["error"] = f"rank {first['rank']}: {first['error']}"
    rank0 = results.get(0) or {}
    if rank0.get("ceilings"):
        m["ceilings"] = {**rank0["ceilings"], "interconnect": rank0.get("interconnect")}
    m["artifacts"] = _top_artifacts(ranks)
    m["total_steps"] = ranks[0]["total_steps"]
    m["observer"] = worst_residual(ranks)
    cost = {r: (res or {}).get("comm_cost") for r, res in results.items()}
    m["distributed"] = {
        "world_size": n,
        "nnodes": 1,
        "nproc_per_node": n,
        "backend": backend_for(cfg.device),
        "parallel": cfg.parallel,
        **launcher,
        "global_batch": n * cfg.batch * cfg.grad_accum,
        "per_rank_batch": cfg.batch,
        "global_tokens_per_step": n * cfg.tokens_per_step,
        "data": "rank R draws its batches with seed + R (rank 0's are the one-GPU run's)",
        "wrapping": parallel_info(cfg),
        "env": dict(env),
        "failed_rank": first["rank"] if first else None,
        "ranks": ranks,
        "comm_cost": combine(cost, n, rounds=cfg.comm_rounds, steps=cfg.comm_steps),
    }
    return m


def _gbs(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v / 1e9:.1f} GB/s"


def summary_lines(m: Mapping[str, Any]) -> list[str]:
    """The multi-GPU lines of ``tracekit collect``'s summary."""
    d = m["distributed"]
    lines = [
        f"ranks: {d['world_size']} ({d['backend']}, {d['parallel']}); global batch "
        f"{d['global_batch']} = {d['world_size']} x {d['per_rank_batch']}"
    ]
    per_rank = []
    for r in d["ranks"]:
        met = r.get("metrics")
        st = f"{met['step_time_ms']['median']:.2f} ms" if met else "-"
        per_rank.append(f"rank {r['rank']} {r['status']} {st}")
    lines.append("by rank: " + "; ".join(per_rank))
    met = m.get("metrics")
    if met:
        tok = met.get("tokens_per_s_per_gpu")  # unknown for a script without token ids
        lines.append(
            f"slowest rank {met['slowest_rank']} (skew {met['step_time_skew_pct']:.1f} %)"
            + (f"; {tok:,.0f} tokens/s per GPU" if tok is not None else "")
        )
    lines += comm_cost_lines(d.get("comm_cost"))
    ic = (m.get("ceilings") or {}).get("interconnect")
    if ic:
        lines.append(
            f"interconnect: all-reduce busbw {_gbs(ic['busbw_Bps'])} peak at "
            f"{ic['peak_at_bytes'] / 2**20:g} MiB ({ic['world_size']} ranks, {ic['backend']})"
        )
    lines.append(
        f"traces: {len(m['artifacts']['traces'])} (rank<R>.*); logs: "
        f"{LOGS}/rank<R>.{{stdout,stderr}}.log"
    )
    return lines


def comm_cost_lines(cost: Mapping[str, Any] | None) -> list[str]:
    """The summary's line of the measured communication cost (none for a run without)."""
    if not cost:
        return []
    if cost["status"] != "ok":
        return [f"communication cost: {cost['status']} ({cost['reason']})"]
    per_rank = [
        f"rank {r['rank']} {r['cost_ms']:.2f} ms ("
        + ("n/a" if r["cost_pct"] is None else f"{r['cost_pct']:.0f} %")
        + f", {r['cost_ms_range'][0]:.2f}–{r['cost_ms_range'][1]:.2f}) of "
        f"{r['with_sync_ms']:.2f} ms"
        for r in cost["ranks"]
    ]
    lines = [
        f"communication cost (unprofiled, measured: {cost['rounds']} rounds x "
        f"{cost['steps_per_round']} steps with and without {cost['sync_off']}): "
        + "; ".join(per_rank)
    ]
    if cost.get("caveat"):
        lines.append(f"  caveat: {cost['caveat']}")
    return lines


def worst_residual(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The top-level ``observer`` of a multi-rank run: the rank with the largest residual
    after the passes (a rank whose timing carries a residual skews the measured
    communication cost and the straggler), with every rank's residual in per cent."""
    seen = [(r["rank"], r["observer"]) for r in ranks if r.get("observer")]
    if not seen:
        return None
    with_res = [(rk, o) for rk, o in seen if o.get("residual")]
    rank, worst = max(with_res, key=lambda x: x[1]["residual"]["ratio"], default=seen[0])
    left = sorted({w for _, o in seen for w in o.get("left_behind") or []})
    return {**worst, "rank": rank, "left_behind": left,
            "residual_pct_by_rank": {str(rk): (o.get("residual") or {}).get("pct")
                                     for rk, o in seen}}  # fmt: skip

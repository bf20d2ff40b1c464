"""Scaling from fewer to more GPUs (``tracekit compare`` of a 1-GPU and an N-GPU run): the
efficiency and where the lost time went.

**Efficiency** = tokens/s per GPU of the larger run / tokens/s per GPU of the smaller
(weak scaling: the same batch per GPU; 100 % = perfect). Tokens/s come from the runs'
manifests (measured without the profiler: ``metrics.tokens_per_s_per_gpu``, or
``tokens_per_s`` of a one-GPU run), else from the traces (tokens per step per GPU /
profiled step time), else the step times alone stand for them (same per-GPU batch
assumed, said in the note).

**Where the time went**, on one basis. Where both runs' manifests hold the unprofiled
step (``step_basis`` ``unprofiled``), the change of that step is split into the larger
run's communication cost measured without the profiler (``distributed.comm_cost``, mean
over ranks; :mod:`tracekit.ranks.measured`) and the rest; without a measured cost only
the change is given. The **skew** is then the unprofiled one (the ranks' steps without
gradient sync, else their timed steps: largest minus smallest).

Without unprofiled steps (``step_basis`` ``profiled``: bare traces), the profiled step is
split as a trace shows it: a step is compute + exposed communication + GPU idle (its busy
time is compute plus the communication no compute hides; the rest is idle), per rank and
averaged over ranks, and the change is split exactly into those three changes; the skew
is the slowest rank's step time minus the median rank's. That split is always kept under
``profiled``: its exposed communication holds the profiled window's sync waits, which the
profiler can make (one rank's host slowed more than another's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tracekit.manifest import Metrics, as_manifest
from tracekit.ranks.reduce import RanksSummary


@dataclass(frozen=True)
class Side:
    """One run's figures per step (ms; mean over ranks), its GPUs and throughput."""

    label: str
    gpus: int
    step_ms: float
    compute_ms: float
    exposed_comm_ms: float
    idle_ms: float
    skew_ms: float
    tokens_per_s_per_gpu: float | None
    source: str  # where the throughput comes from
    unprofiled_step_ms: float | None = None  # the manifest's (slowest rank's) median step
    comm_cost_ms: float | None = None  # measured without the profiler (0: one GPU)
    unprofiled_skew_ms: float | None = None  # largest - smallest unprofiled (own) step
    skew_words: str = "slowest rank over the median, profiled"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def _throughput(
    met: Metrics, gpus: int, tokens_per_step: float | None, step_ms: float
) -> tuple[float | None, str]:
    per_gpu = _num(met.tokens_per_s_per_gpu)
    if per_gpu is not None:
        return per_gpu, "manifest (unprofiled)"
    total = _num(met.tokens_per_s)
    if total is not None:
        world = _num(met.world_size) or gpus
        return total / world, "manifest (unprofiled)"
    if tokens_per_step and step_ms > 0:
        return tokens_per_step / (step_ms / 1e3), "trace (profiled steps)"
    return None, "step times (same batch per GPU assumed)"


def side_of(label: str, sm: Any, ranks: RanksSummary | None, manifest: Any) -> Side:
    """A run's figures: from its multi-rank analysis, else from its one trace's summary
    (``sm``: a :class:`tracekit.summary.Summary`)."""
    tokens = sm.header.tokens_per_step
    mf = as_manifest(manifest)
    if ranks is not None and len(ranks.per_rank):
        pr = ranks.per_rank
        med = float(pr["step_time_ms"].median())
        step = float(pr["step_time_ms"].mean())
        tput, src = _throughput(mf.metrics, len(ranks.ranks), tokens, step)
        m = ranks.measured
        own = m is not None and m.own_spread_ms is not None
        return Side(
            label=label,
            gpus=ranks.world_size,
            step_ms=step,
            compute_ms=float(pr["compute_ms"].mean()),
            exposed_comm_ms=float(pr["exposed_comm_ms"].mean()),
            idle_ms=float(pr["gpu_idle_ms"].mean()),
            skew_ms=float(pr["step_time_ms"].max()) - med,
            tokens_per_s_per_gpu=tput,
            source=src,
            unprofiled_step_ms=m.unprofiled_step_ms if m is not None else None,
            comm_cost_ms=m.comm_ms if m is not None and m.basis == "measured" else None,
            unprofiled_skew_ms=m.unprofiled_spread_ms if m is not None else None,
            skew_words=f"unprofiled steps{' without gradient sync' if own else ''}, largest "
            "minus smallest",
        )
    st = sm.step_table
    step = float(st["step_time_ms"].mean()) if len(st) else math.nan
    busy = float(st["gpu_busy_ms"].mean()) if len(st) else math.nan
    bd = sm.breakdown
    exposed = float(bd.exposed_comm_ms) if bd is not None and bd.comm_source == "trace" else 0.0
    gpus = mf.config.gpus or 1
    tput, src = _throughput(mf.metrics, gpus, tokens, step)
    unprofiled = _num(mf.metrics.step_median_ms)
    return Side(
        label, gpus, step, busy - exposed, exposed, step - busy, 0.0, tput, src,
        unprofiled_step_ms=unprofiled,
        comm_cost_ms=0.0 if gpus == 1 else None,
        unprofiled_skew_ms=0.0 if gpus == 1 else None,
    )  # fmt: skip


def _profiled(small: Side, big: Side) -> dict[str, Any]:
    """The profiled steps' change, split as the traces show it."""
    lost = big.step_ms - small.step_ms
    parts = {
        "exposed_communication_ms": big.exposed_comm_ms - small.exposed_comm_ms,
        "gpu_idle_ms": big.idle_ms - small.idle_ms,
        "compute_ms": big.compute_ms - small.compute_ms,
    }
    return {
        "step_ms": {"from": small.step_ms, "to": big.step_ms},
        "lost_ms_per_step": lost,
        "where": parts,
        "where_pct_of_lost": {k: 100.0 * v / lost if lost else None for k, v in parts.items()},
        "skew_ms": big.skew_ms,
    }


def _unprofiled(small: Side, big: Side) -> dict[str, Any] | None:
    """The unprofiled steps' change: the measured communication cost and the rest."""
    if small.unprofiled_step_ms is None or big.unprofiled_step_ms is None:
        return None
    lost = big.unprofiled_step_ms - small.unprofiled_step_ms
    comm = None
    if big.comm_cost_ms is not None and small.comm_cost_ms is not None:
        comm = big.comm_cost_ms - small.comm_cost_ms
    parts = {"communication_ms": comm, "rest_ms": lost - comm if comm is not None else None}
    return {
        "step_ms": {"from": small.unprofiled_step_ms, "to": big.unprofiled_step_ms},
        "lost_ms_per_step": lost,
        "where": parts,
        "where_pct_of_lost": {
            k: 100.0 * v / lost if lost and v is not None else None for k, v in parts.items()
        },
        "skew_ms": big.unprofiled_skew_ms,
    }


def scaling(a: Side, b: Side) -> dict[str, Any] | None:
    """The scaling block of ``compare.json`` (None when both runs have as many GPUs)."""
    if a.gpus == b.gpus:
        return None
    small, big = (a, b) if a.gpus < b.gpus else (b, a)
    if small.tokens_per_s_per_gpu and big.tokens_per_s_per_gpu and small.source == big.source:
        eff = 100.0 * big.tokens_per_s_per_gpu / small.tokens_per_s_per_gpu
        basis = f"tokens/s per GPU from the {big.source}"
    else:
        eff = 100.0 * small.step_ms / big.step_ms if big.step_ms > 0 else math.nan
        basis = "step time ratio (the same batch per GPU assumed)"
    prof = _profiled(small, big)
    unprof = _unprofiled(small, big)
    on = unprof if unprof is not None else prof
    return {
        "from_gpus": small.gpus,
        "to_gpus": big.gpus,
        "from": small.label,
        "to": big.label,
        "efficiency_pct": eff,
        "basis": basis,
        "step_basis": "unprofiled" if unprof is not None else "profiled",
        "tokens_per_s_per_gpu": {
            "from": small.tokens_per_s_per_gpu,
            "to": big.tokens_per_s_per_gpu,
        },
        **on,
        "skew_words": big.skew_words if unprof is not None else "slowest rank over the median",
        "profiled": prof,
        "figures": {
            side.label: {
                "gpus": side.gpus,
                "step_ms": side.step_ms,
                "compute_ms": side.compute_ms,
                "exposed_comm_ms": side.exposed_comm_ms,
                "idle_ms": side.idle_ms,
                "skew_ms": side.skew_ms,
                "throughput_source": side.source,
                "unprofiled_step_ms": side.unprofiled_step_ms,
                "comm_cost_ms": side.comm_cost_ms,
                "unprofiled_skew_ms": side.unprofiled_skew_ms,
            }
            for side in (small, big)
        },
    }


def _split(p: dict[str, Any]) -> str:
    w = p["where"]
    return (
        f"exposed communication {w['exposed_communication_ms']:+.3f} ms, GPU idle "
        f"{w['gpu_idle_ms']:+.3f} ms, compute {w['compute_ms']:+.3f} ms"
    )


def sentence(s: dict[str, Any]) -> str:
    """The scaling block in one line."""
    head = (
        f"scaling {s['from_gpus']} -> {s['to_gpus']} GPUs: efficiency {s['efficiency_pct']:.1f} % "
        f"({s['basis']})"
    )
    skew = s["skew_ms"]
    skew_text = f"skew ({s['skew_words']}) " + ("unknown" if skew is None else f"{skew:.3f} ms")
    if s["step_basis"] == "profiled":
        return (
            f"{head}; the step grew {s['lost_ms_per_step']:+.3f} ms: {_split(s)}; skew "
            f"(slowest rank over the median) {skew:.3f} ms"
        )
    st, w, p = s["step_ms"], s["where"], s["profiled"]
    grew = (
        f"the unprofiled step grew {s['lost_ms_per_step']:+.3f} ms ({st['from']:.3f} -> "
        f"{st['to']:.3f} ms)"
    )
    if w["communication_ms"] is not None:
        split = (
            f"measured communication cost {w['communication_ms']:+.3f} ms, the rest "
            f"{w['rest_ms']:+.3f} ms"
        )
    else:
        split = "communication cost not measured (tracekit collect --gpus N measures it)"
    return (
        f"{head}; {grew}: {split}; {skew_text}; in the profiled window the step grew "
        f"{p['lost_ms_per_step']:+.3f} ms ({_split(p)}), not on this basis"
    )

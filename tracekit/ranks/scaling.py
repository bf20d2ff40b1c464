"""Scaling from fewer to more GPUs (``tracekit compare`` of a 1-GPU and an N-GPU run): the
efficiency and where the lost time went.

**Efficiency** = tokens/s per GPU of the larger run / tokens/s per GPU of the smaller
(weak scaling: the same batch per GPU; 100 % = perfect). Tokens/s come from the runs'
manifests (measured without the profiler: ``metrics.tokens_per_s_per_gpu``, or
``tokens_per_s`` of a one-GPU run), else from the traces (tokens per step per GPU /
profiled step time), else the step times alone stand for them (same per-GPU batch
assumed, said in the note).

**Where the time went**: a step is compute + exposed communication + GPU idle (its busy
time is compute plus the communication no compute hides; the rest is idle), per rank
and averaged over ranks. The change of the step from the smaller to the larger run is
split exactly into those three changes; the **skew** (slowest rank's step time minus the
median rank's) is the part of the larger run's step that one rank keeps the others
waiting for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def _throughput(
    manifest: Any, gpus: int, tokens_per_step: float | None, step_ms: float
) -> tuple[float | None, str]:
    per_gpu = _num(_get(manifest, "metrics", "tokens_per_s_per_gpu"))
    if per_gpu is not None:
        return per_gpu, "manifest (unprofiled)"
    total = _num(_get(manifest, "metrics", "tokens_per_s"))
    if total is not None:
        world = _num(_get(manifest, "metrics", "world_size")) or gpus
        return total / world, "manifest (unprofiled)"
    if tokens_per_step and step_ms > 0:
        return tokens_per_step / (step_ms / 1e3), "trace (profiled steps)"
    return None, "step times (same batch per GPU assumed)"


def side_of(label: str, sm: Any, ranks: RanksSummary | None, manifest: Any) -> Side:
    """A run's figures: from its multi-rank analysis, else from its one trace's summary
    (``sm``: a :class:`tracekit.summary.Summary`)."""
    tokens = sm.header.tokens_per_step
    if ranks is not None and len(ranks.per_rank):
        pr = ranks.per_rank
        med = float(pr["step_time_ms"].median())
        step = float(pr["step_time_ms"].mean())
        tput, src = _throughput(manifest, len(ranks.ranks), tokens, step)
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
        )
    st = sm.step_table
    step = float(st["step_time_ms"].mean()) if len(st) else math.nan
    busy = float(st["gpu_busy_ms"].mean()) if len(st) else math.nan
    bd = sm.breakdown
    exposed = float(bd.exposed_comm_ms) if bd is not None and bd.comm_source == "trace" else 0.0
    gpus = int(_get(manifest, "config", "gpus") or 1)
    tput, src = _throughput(manifest, gpus, tokens, step)
    return Side(label, gpus, step, busy - exposed, exposed, step - busy, 0.0, tput, src)


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
    lost = big.step_ms - small.step_ms
    parts = {
        "exposed_communication_ms": big.exposed_comm_ms - small.exposed_comm_ms,
        "gpu_idle_ms": big.idle_ms - small.idle_ms,
        "compute_ms": big.compute_ms - small.compute_ms,
    }
    return {
        "from_gpus": small.gpus,
        "to_gpus": big.gpus,
        "from": small.label,
        "to": big.label,
        "efficiency_pct": eff,
        "basis": basis,
        "tokens_per_s_per_gpu": {
            "from": small.tokens_per_s_per_gpu,
            "to": big.tokens_per_s_per_gpu,
        },
        "step_ms": {"from": small.step_ms, "to": big.step_ms},
        "lost_ms_per_step": lost,
        "where": parts,
        "where_pct_of_lost": {k: 100.0 * v / lost if lost else None for k, v in parts.items()},
        "skew_ms": big.skew_ms,
        "figures": {
            side.label: {
                "gpus": side.gpus,
                "step_ms": side.step_ms,
                "compute_ms": side.compute_ms,
                "exposed_comm_ms": side.exposed_comm_ms,
                "idle_ms": side.idle_ms,
                "skew_ms": side.skew_ms,
                "throughput_source": side.source,
            }
            for side in (small, big)
        },
    }


def sentence(s: dict[str, Any]) -> str:
    """The scaling block in one line."""
    w = s["where"]
    return (
        f"scaling {s['from_gpus']} -> {s['to_gpus']} GPUs: efficiency {s['efficiency_pct']:.1f} % "
        f"({s['basis']}); the step grew {s['lost_ms_per_step']:+.3f} ms: exposed "
        f"communication {w['exposed_communication_ms']:+.3f} ms, GPU idle "
        f"{w['gpu_idle_ms']:+.3f} ms, compute {w['compute_ms']:+.3f} ms; skew (slowest rank "
        f"over the median) {s['skew_ms']:.3f} ms"
    )

"""Measure the levers: the baseline again, each lever alone, then the recommended
combination (``tracekit.advise.search``; the greedy :func:`choose` for the memory objective
and without paired rounds), each a row of one sweep (``tracekit.sweep``: a ``tracekit
collect`` subprocess per row, resume, OOM rows, Ctrl-C keeps the finished rows)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import tracekit.advise.levers as L
from tracekit.advise.baseline import Baseline
from tracekit.sweep.plan import Point, SweepPlan
from tracekit.sweep.runner import default_env, run_sweep

OBJECTIVES = ("time", "memory", "tokens-per-s")
MIN_GAIN = 0.01  # a lever must improve the objective by more than this to join a combination
BASELINE = "baseline"


@dataclass(frozen=True)
class MeasureOptions:
    steps: int = 10
    warmup: int = 3
    timeout_s: float = 600.0
    factor: int = 2  # batch and grad-accum multiplier


def plan(b: Baseline, points: Sequence[Point], opts: MeasureOptions) -> SweepPlan:
    """A sweep of exactly ``points``, collected as the baseline was (preset, device,
    layers, seed, learning rate)."""
    cfg = b.config
    extra: list[str] = []
    if int(cfg.get("seed") or 0) != 0:
        extra += ["--seed", str(int(cfg["seed"]))]
    if cfg.get("lr") not in (None, 3e-4):
        extra += ["--lr", str(cfg["lr"])]
    if cfg.get("data"):
        extra += ["--data", str(cfg["data"])]
    cpu = cfg.get("device") == "cpu"
    return SweepPlan(
        preset=str(cfg["preset"]),
        device=str(cfg.get("device") or "cuda"),
        layers=cfg.get("layers"),
        gpus=(int(cfg.get("gpus") or 1),),
        parallel=str(cfg.get("parallel") or "ddp"),
        steps=opts.steps,
        warmup=max(opts.warmup, 1),  # CUDA graphs are captured in a warm-up step
        profile_active=1,
        timeout_s=opts.timeout_s,
        with_stack=cpu,  # CPU: the memory timeline is the only peak there is
        collect_args=tuple(extra),
        explicit=tuple(points),
    )


def points_for(b: Baseline, names: Sequence[str], factor: int) -> dict[str, Point]:
    """The baseline's point and each lever's (the levers that apply)."""
    out = {BASELINE: L.point(b.config)}
    for n in names:
        lv = L.LEVERS[n]
        if L.skip_reason(lv, b.config) is None:
            out[n] = L.point(lv.apply(b.config, factor))
    return out


def run(
    b: Baseline,
    points: Mapping[str, Point],
    out: Path,
    opts: MeasureOptions,
    *,
    resume: bool,
    quiet: bool,
    env: Mapping[str, str] | Callable[[Point], Mapping[str, str]] | None = None,
) -> pd.DataFrame:
    """Collect the points (one sweep row each; ``env`` per point for tests)."""
    return run_sweep(
        plan(b, list(points.values()), opts),
        out,
        resume=resume,
        quiet=quiet,
        env=env if env is not None else default_env(),
    )


def gain(row: Mapping[str, Any], base: Mapping[str, Any], objective: str) -> float:
    """How many times better ``row`` is than ``base`` on the objective (> 1: better)."""
    if objective == "time":
        a, b_ = base.get("step_time_ms"), row.get("step_time_ms")
    elif objective == "memory":
        a, b_ = base.get("peak_bytes"), row.get("peak_bytes")
    else:
        a, b_ = row.get("tokens_per_s"), base.get("tokens_per_s")
    try:
        a, b_ = float(a), float(b_)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return a / b_ if b_ > 0 and math.isfinite(a) and math.isfinite(b_) else math.nan


def choose(
    gains: Mapping[str, float],
    order: Sequence[str] = L.ORDER,
    sure: set[str] | None = None,
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Greedy: the levers that improved the objective by more than ``MIN_GAIN`` (and, with
    ``sure``, whose interval says so), best first, dropping one of two that cannot go
    together. Returns (chosen, dropped with why)."""
    good = [
        n for n in order if gains.get(n, math.nan) > 1.0 + MIN_GAIN and (sure is None or n in sure)
    ]
    good.sort(key=lambda n: -gains[n])
    dropped = L.conflicts([L.LEVERS[n] for n in good])
    gone = {d for _, d, _ in dropped}
    return [n for n in good if n not in gone], dropped

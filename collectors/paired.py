"""Paired timing of two training configurations in one process, without the profiler.

``tracekit advise`` runs ``python -m tracekit.collectors.paired SPEC OUT`` per lever: both
workloads are built side by side, warmed up, then timed in rounds of one window of K steps
each, in alternating order (A B, B A, ...), with CUDA events. Rounds continue until the
90 % interval of the step-time ratio is within +-``half_width`` (after ``min_rounds``), up
to ``max_rounds`` or ``budget_s`` seconds of rounds. The result (every round, the interval,
why it stopped) is written atomically as JSON; CUDA out of memory gives status ``oom``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors.paired_stats import RatioInterval, ratio_interval, settled
from tracekit.io import atomic_write_json, freeze_before_exit

Window = Callable[[int], float]  # steps -> median step ms of a window of that many steps


@dataclass(frozen=True)
class Rounds:
    """How many rounds and how long (``PairedSpec``'s part that the loop needs)."""

    steps: int = 5  # steps per window
    min_rounds: int = 5
    max_rounds: int = 30
    budget_s: float = 60.0  # seconds of rounds (the build and warm-up not counted)
    half_width: float = 0.05  # stop once the 90 % interval is within +-5 %

    def __post_init__(self) -> None:
        if self.steps < 1 or self.min_rounds < 2 or self.max_rounds < self.min_rounds:
            raise ValueError(f"paired rounds need steps >= 1 and 2 <= min <= max: {self}")
        if not self.budget_s > 0 or not self.half_width > 0:
            raise ValueError(f"paired rounds need a positive budget and half width: {self}")


def paired_rounds(
    base: Window,
    other: Window,
    r: Rounds,
    *,
    clock: Callable[[], float] = time.perf_counter,
    on_round: Callable[[int, RatioInterval], None] | None = None,
) -> tuple[list[dict[str, Any]], RatioInterval, str]:
    """Time ``base`` and ``other`` in alternating rounds; returns the rounds, the ratio's
    interval (other / base) and why it stopped ('settled', 'budget' or 'max_rounds')."""
    rounds: list[dict[str, Any]] = []
    t0 = clock()
    iv = ratio_interval([])
    while True:
        first_base = len(rounds) % 2 == 0  # A B, then B A: a drift within a round cancels
        if first_base:
            a = base(r.steps)
            b = other(r.steps)
        else:
            b = other(r.steps)
            a = base(r.steps)
        rounds.append(
            {"base_ms": a, "other_ms": b, "ratio": b / a, "order": "AB" if first_base else "BA"}
        )
        iv = ratio_interval([x["ratio"] for x in rounds])
        if on_round is not None:
            on_round(len(rounds), iv)
        if settled(iv, r.min_rounds, r.half_width):
            return rounds, iv, "settled"
        if len(rounds) >= r.max_rounds:
            return rounds, iv, "max_rounds"
        if clock() - t0 >= r.budget_s and len(rounds) >= r.min_rounds:
            return rounds, iv, "budget"


def summary(rounds: list[dict[str, Any]], iv: RatioInterval, stopped: str) -> dict[str, Any]:
    """The result document's figures."""
    return {
        "status": "ok",
        "base_ms": statistics.median(x["base_ms"] for x in rounds),
        "other_ms": statistics.median(x["other_ms"] for x in rounds),
        "interval": iv.to_dict(),
        "stopped": stopped,
        "rounds": rounds,
    }


def _window(wl: Any, device: Any, start: list[int]) -> Window:
    """K steps of a workload timed with CUDA events (host clock on CPU): their median."""
    from tracekit.collectors.train import StepTimer, run_steps

    def run(k: int) -> float:
        timer = StepTimer(device)
        run_steps(wl.step, k, start=start[0], timer=timer)
        start[0] += k
        return float(statistics.median(timer.millis()))

    return run


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Build both configurations, warm them up, time them in rounds (see module doc)."""
    import torch

    from tracekit.collectors.config import config_from_dict
    from tracekit.collectors.train import build_workload, run_steps

    a_cfg, b_cfg = config_from_dict(spec["base"]), config_from_dict(spec["other"])
    device = torch.device(a_cfg.device)
    r = Rounds(**spec.get("rounds", {}))
    t0 = time.perf_counter()
    wls = [build_workload(a_cfg, device), build_workload(b_cfg, device)]
    warm = max(int(spec.get("warmup", 3)), 1)  # CUDA graphs are captured in warm-up
    for wl in wls:
        run_steps(wl.step, warm, start=0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    build_s = time.perf_counter() - t0

    def say(n: int, iv: RatioInterval) -> None:
        print(f"round {n}: ratio {iv.ratio:.4f} [{iv.lo:.4f}, {iv.hi:.4f}]", file=sys.stderr)

    base, other = _window(wls[0], device, [warm]), _window(wls[1], device, [warm])
    rounds, iv, stopped = paired_rounds(base, other, r, on_round=say)
    doc = summary(rounds, iv, stopped)
    doc.update(build_s=build_s, device=str(device), steps_per_window=r.steps)
    if device.type == "cuda":
        doc["device_name"] = torch.cuda.get_device_name(device)
    return doc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m tracekit.collectors.paired SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec, out = json.loads(Path(args[0]).read_text()), Path(args[1])
    try:
        doc = measure(spec)
    except Exception as e:  # one result per lever: the caller reads the status
        import torch

        oom = isinstance(e, torch.OutOfMemoryError)
        doc = {"status": "oom" if oom else "error", "error": f"{type(e).__name__}: {e}"}
    atomic_write_json(out, doc)
    return 0 if doc["status"] == "ok" else 3


if __name__ == "__main__":
    code = main()
    freeze_before_exit()
    sys.exit(code)

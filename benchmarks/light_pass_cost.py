"""What the light timeline pass itself costs the step: paired against unprofiled windows.

``tracekit collect`` compares its light pass (``collectors/passes.py``: CUDA activity only,
step markers) with the unprofiled steps it timed a second earlier. On a host whose speed
drifts between those moments, that one comparison mixes the pass's own cost with the
drift (``benchmarks/timeline_overhead.py --rounds``). This script separates them: windows
of the same step function with the same schedule, unprofiled and under
:class:`~tracekit.collectors.passes.LightProfiler`, interleaved round by round (the order
rotated and reversed every other round: A B, B A, ...), each started after
``gc.collect()``, the recorded steps timed with CUDA events (``perf_counter`` on CPU, where
the light pass has nothing to record: a smoke).

    python benchmarks/light_pass_cost.py                    # fp32 naive, gpt2-small b8 s128
    python benchmarks/light_pass_cost.py --dtype bf16 --attention sdpa
    python benchmarks/light_pass_cost.py --external-correlation   # and the pass as torch defaults
    python benchmarks/light_pass_cost.py --device cpu --preset tiny --batch 2 --seq 32 --rounds 2

Prints one line per round and two estimates: the ratio of the medians of all recorded
steps (``ratio light/unprofiled``), and the median of the per-round ratios of two windows
run back to back (``paired ratio``, with its interquartile range), which cancels drift
between rounds. It also prints the spread of the unprofiled windows (how far the host moved
the step without any profiler) and, on Linux, the share of CPU time the hypervisor stole
during the run (``/proc/stat``). The first round (``--discard``) absorbs one-time costs.
``--launch-cost`` first times a tiny operator on a CPU tensor (no kernel) and on a CUDA
tensor (one launch), without and under a CUDA-only profiler: what the pass costs one launch
on this host, the floor of its cost on a step whose host time is all launches.
``--external-correlation`` adds a third window, the light pass with Kineto's external
correlation on (torch's default; collect turns it off), so both are paired against the
same unprofiled windows. With ``--check`` it exits 1 when the light pass's paired ratio
exceeds ``1 + --budget`` (default 0.10, the light pass's target).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.passes import LightProfiler, profiled_steps
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.collectors.train import StepTimer, Workload, build_workload, run_steps


def unprofiled_window(wl: Workload, pcfg: ProfilerConfig, start: int) -> list[float]:
    """The same steps as a light window, no profiler; the ones it would record."""
    timer = StepTimer(wl.device)
    run_steps(wl.step, pcfg.steps, start=start, timer=timer)
    return [t for i, t in enumerate(timer.millis()) if pcfg.is_active(i)]


class _WithExternalCorrelation(LightProfiler):
    """The light pass with Kineto's external correlation on (torch's default)."""

    def experimental_config(self) -> Any:
        return None


def light_window(
    wl: Workload, pcfg: ProfilerConfig, start: int, out: Path, *, xcorr: bool = False
) -> list[float]:
    """collect's light pass: :class:`LightProfiler` over the same schedule (``xcorr``: with
    external correlation on, as before collect turned it off)."""
    if wl.device.type != "cuda":  # nothing to record: time the same loop (smoke)
        return unprofiled_window(wl, pcfg, start)
    cls = _WithExternalCorrelation if xcorr else LightProfiler
    return profiled_steps(wl.step, cls(pcfg, out, device=wl.device), start)


def _per_op_us(x: torch.Tensor, n: int) -> float:
    """Host µs per ``x.add(1)`` over ``n`` calls (a kernel launch each on CUDA)."""
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add(1)
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    return (time.perf_counter() - t0) / n * 1e6


def launch_cost(device: torch.device, n: int = 20000, rounds: int = 3) -> dict[str, float]:
    """What a CUDA-only profiler session costs one operator on the host: median µs per op
    of a tiny op on a CPU tensor (no kernel) and on a CUDA tensor (one launch), without and
    with ``activities=[CUDA]``."""
    xs = {"cpu": torch.ones(4), "cuda": torch.ones(4, device=device)}
    for x in xs.values():
        _per_op_us(x, n // 10)
    got: dict[str, list[float]] = {}
    for _ in range(rounds):
        for k, x in xs.items():
            got.setdefault(f"{k} op", []).append(_per_op_us(x, n))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            for k, x in xs.items():
                got.setdefault(f"{k} op, CUDA-only profiler", []).append(_per_op_us(x, n))
    return {k: statistics.median(v) for k, v in got.items()}


def cpu_steal() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat, None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def _iqr(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpt2-small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--attention", default="naive")
    p.add_argument("--active", type=int, default=4, help="recorded steps per window")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--discard", type=int, default=1, help="first rounds not counted")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before round 1")
    p.add_argument(
        "--external-correlation", action="store_true",
        help="also time the light pass with Kineto's external correlation on (torch's default)",
    )  # fmt: skip
    p.add_argument(
        "--launch-cost", action="store_true",
        help="first measure the CUDA-only profiler's host cost per operator and per launch",
    )  # fmt: skip
    p.add_argument("--check", action="store_true")
    p.add_argument("--budget", type=float, default=0.10)
    args = p.parse_args(argv)
    if args.rounds <= args.discard:
        p.error("--rounds must exceed --discard")
    cfg = CollectConfig(
        preset=args.preset, device=args.device, dtype=args.dtype, attention=args.attention,
        batch=args.batch, seq=args.seq, ceilings=False,
    )  # fmt: skip
    device = resolve_device(cfg)
    pcfg = ProfilerConfig(wait=1, warmup=1, active=args.active)
    wl = build_workload(cfg, device)
    n = 0
    run_steps(wl.step, args.warmup_steps)
    n += args.warmup_steps
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"light pass cost: {name}, torch {torch.__version__}, {args.preset} b{args.batch} "
        f"s{args.seq} {args.dtype} {args.attention}; schedule wait 1, warmup 1, active "
        f"{args.active}; {args.rounds} rounds (first {args.discard} discarded), order rotated "
        "and reversed every other round"
    )
    if args.launch_cost and device.type == "cuda":
        lc = launch_cost(device)
        print("host µs per operator (median of 3 x 20,000): " + ", ".join(
            f"{k} {v:.2f}" for k, v in lc.items()
        ))  # fmt: skip
        base, prof = lc["cuda op"], lc["cuda op, CUDA-only profiler"]
        print(
            f"a launch under the light pass's profiler: +{prof - base:.2f} µs (x{prof / base:.3f})"
        )
    steal0 = cpu_steal()
    kinds = ["plain", "light", *(["light+xcorr"] if args.external_correlation else [])]
    steps: dict[str, list[float]] = {k: [] for k in kinds}
    paired: dict[str, list[float]] = {k: [] for k in kinds[1:]}
    plain_medians: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            order = order if r % 2 == 0 else order[::-1]
            got: dict[str, list[float]] = {}
            for kind in order:
                gc.collect()
                if kind == "plain":
                    got[kind] = unprofiled_window(wl, pcfg, n)
                else:
                    out = Path(tmp) / f"r{r}-{kind}"
                    got[kind] = light_window(wl, pcfg, n, out, xcorr=kind == "light+xcorr")
                n += pcfg.steps
            med = {k: statistics.median(v) for k, v in got.items()}
            kept = r >= args.discard
            print(
                f"round {r}: unprofiled {med['plain']:.2f} ms, "
                + ", ".join(f"{k} {med[k]:.2f} ms x{med[k] / med['plain']:.3f}" for k in kinds[1:])
                + ("" if kept else " (discarded)"),
                flush=True,
            )
            if kept:
                for k in kinds:
                    steps[k] += got[k]
                for k in kinds[1:]:
                    paired[k].append(med[k] / med["plain"])
                plain_medians.append(med["plain"])
    steal1 = cpu_steal()
    for k in kinds[1:]:
        pooled = statistics.median(steps[k]) / statistics.median(steps["plain"])
        lo, hi = _iqr(paired[k])
        print(f"ratio {k}/unprofiled: {pooled:.3f} (medians of all recorded steps)")
        print(
            f"paired ratio {k}: {statistics.median(paired[k]):.3f} (IQR {lo:.3f}-{hi:.3f}, "
            f"{len(paired[k])} rounds)"
        )
    ratio = statistics.median(paired["light"])
    print(
        f"unprofiled windows: median {statistics.median(plain_medians):.2f} ms, "
        f"range {min(plain_medians):.2f}-{max(plain_medians):.2f} ms"
    )
    if steal0 and steal1 and steal1[1] > steal0[1]:
        share = 100.0 * (steal1[0] - steal0[0]) / (steal1[1] - steal0[1])
        print(f"host CPU time stolen by the hypervisor during the run: {share:.1f} %")
    if args.check and ratio > 1 + args.budget:
        print(f"over budget: paired ratio {ratio:.3f} > {1 + args.budget:.3f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

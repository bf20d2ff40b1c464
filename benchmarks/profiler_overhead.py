"""Profiler overhead of the collector vs a bare ``torch.profiler.profile``.

The issue's budget: the collector's profiled step is within 2 % of the same step
under a bare ``torch.profiler.profile`` with the same options. Both sides run the
same step function of one model (``tracekit.collectors.train``), timed the same
way (CUDA events around each step, read after the window; ``perf_counter`` on
CPU), over the active steps of the same schedule; the two are interleaved round
by round (A B B A ...) so drift in clocks or temperature hits both alike.

    python benchmarks/profiler_overhead.py                       # CUDA, gpt2-small b8 s128
    python benchmarks/profiler_overhead.py --dtype bf16 --attention sdpa
    python benchmarks/profiler_overhead.py --device cpu --preset tiny --rounds 2   # smoke

A first round per side (``--discard``) absorbs one-time costs (CUPTI start-up) and is
not counted. Each window starts after ``gc.collect()``, so that no window pays for freeing
another's profiler results. Prints one line per round and two estimates: the ratio of the
medians of all steps (``ratio collector/bare``), and the median of the per-round ratios of
the two windows run back to back (``paired ratio``, with its interquartile range), which
cancels drift between rounds (the host's load, clocks). With ``--check`` exits 1 when the
paired ratio exceeds ``1 + --budget`` (default 0.02).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.profiler import Profiler, ProfilerConfig, activities
from tracekit.collectors.train import StepTimer, Workload, build_workload, run_steps


def collector_window(wl: Workload, pcfg: ProfilerConfig, start: int, out: Path) -> list[float]:
    """The collector's code path: ``Profiler`` + ``run_steps`` (as ``collect`` runs it)."""
    timer = StepTimer(wl.device)
    with Profiler(pcfg, out, device=wl.device) as prof:
        run_steps(wl.step, pcfg.steps, start=start, timer=timer, stepper=prof)
    ms = timer.millis()
    return [t for i, t in enumerate(ms) if pcfg.is_active(i)]


def bare_window(wl: Workload, pcfg: ProfilerConfig, start: int, out: Path) -> list[float]:
    """A bare ``torch.profiler.profile`` with the same options, schedule and timing."""
    timer = StepTimer(wl.device)
    with torch.profiler.profile(
        activities=activities(wl.device),
        schedule=pcfg.schedule(),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out), use_gzip=True),
        record_shapes=pcfg.record_shapes,
        profile_memory=pcfg.profile_memory,
        with_flops=pcfg.with_flops,
        with_stack=pcfg.with_stack,
        with_modules=pcfg.with_modules,
    ) as prof:
        for i in range(start, start + pcfg.steps):
            with timer.time():
                wl.step(i)
            prof.step()
    ms = timer.millis()
    return [t for i, t in enumerate(ms) if pcfg.is_active(i)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="gpt2-small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--attention", default="naive")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=6, help="windows per side, interleaved")
    ap.add_argument("--discard", type=int, default=1, help="first rounds not counted (CUPTI init)")
    ap.add_argument("--active", type=int, default=5, help="profiled steps per window")
    ap.add_argument("--with-stack", action="store_true")
    ap.add_argument("--budget", type=float, default=0.02)
    ap.add_argument("--check", action="store_true", help="exit 1 if over budget")
    ap.add_argument(
        "--control",
        choices=("bare", "collector"),
        help="run this kind in both slots (a control: any ratio is the harness's own bias)",
    )
    a = ap.parse_args(argv)

    cfg = CollectConfig(
        preset=a.preset, device=a.device, batch=a.batch, seq=a.seq, dtype=a.dtype,
        attention=a.attention, warmup=a.warmup, memory_snapshot=False, ceilings=False,
    )  # fmt: skip
    pcfg = ProfilerConfig(wait=1, warmup=1, active=a.active, with_stack=a.with_stack,
                          memory_timeline=False)  # fmt: skip
    device = resolve_device(cfg)
    wl = build_workload(cfg, device)
    run_steps(wl.step, cfg.warmup)
    unprof = StepTimer(device)
    run_steps(wl.step, max(a.active, 5), start=cfg.warmup, timer=unprof)
    n = cfg.warmup + max(a.active, 5)
    print(f"device {device}, {cfg.run_name()}, unprofiled median "
          f"{statistics.median(unprof.millis()):.3f} ms")  # fmt: skip

    samples: dict[str, list[float]] = {"collector": [], "bare": []}
    paired: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(-a.discard, a.rounds):
            order = ("collector", "bare") if r % 2 == 0 else ("bare", "collector")
            medians: dict[str, float] = {}
            for side in order:
                kind = a.control or side
                window = collector_window if kind == "collector" else bare_window
                # Every window starts from a collected heap: torch's profile objects are
                # reference cycles, and whichever window happened to free the previous one's
                # results (hundreds of MB of events) ran slower for it (seen on the H200).
                gc.collect()
                ms = window(wl, pcfg, n, Path(d) / f"{side}{r}")
                n += pcfg.steps
                if r >= 0:
                    samples[side] += ms
                medians[side] = statistics.median(ms)
                print(f"round {r} {side:9s} median {medians[side]:.3f} ms ({len(ms)} steps)")
            if r >= 0:
                paired.append(medians["collector"] / medians["bare"])
    col, bare = statistics.median(samples["collector"]), statistics.median(samples["bare"])
    ratio = col / bare
    label = f" [control: {a.control} in both slots]" if a.control else ""
    print(f"collector {col:.3f} ms, bare {bare:.3f} ms (medians of {len(samples['bare'])} steps)")
    print(f"ratio collector/bare = {ratio:.4f} (budget {1 + a.budget:.2f}){label}")
    pr = statistics.median(paired)
    q1, _, q3 = statistics.quantiles(paired, n=4) if len(paired) > 1 else (pr, pr, pr)
    print(
        f"paired ratio collector/bare = {pr:.4f} (IQR {q1:.4f}-{q3:.4f}, {len(paired)} rounds)"
        f"{label}"
    )
    return 1 if a.check and pr > 1 + a.budget else 0


if __name__ == "__main__":
    sys.exit(main())

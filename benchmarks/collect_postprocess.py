"""The collector's work after a profiled window, tracekit's way against torch's, on one
workload: the FLOP table and the gzipped trace.

    python benchmarks/collect_postprocess.py                       # CUDA, gpt2-small b8 s128
    python benchmarks/collect_postprocess.py --device cpu --preset tiny

For each configuration (bf16 SDPA, fp32 naive) it profiles two steps twice (Kineto saves a
profile's trace only once, so each export gets its own profile):

* FLOP table: :func:`tracekit.collectors.profiler.profiler_flops_rows` (Kineto's events)
  against ``key_averages(group_by_input_shape=True)``, whose rows must be equal;
* trace: :func:`tracekit.collectors.profiler.write_trace` (plain JSON, then
  :func:`tracekit.io.gzip_file`) against torch's own ``export_chrome_trace("x.json.gz")``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.config import CollectConfig, resolve_device
from tracekit.collectors.profiler import (
    activities,
    key_averages_rows,
    profiler_flops_rows,
    write_trace,
)
from tracekit.collectors.train import build_workload


def _profiled(wl: Any, device: torch.device, first: int) -> torch.profiler.profile:
    with torch.profiler.profile(activities=activities(device), record_shapes=True,
                                with_flops=True, profile_memory=True) as prof:  # fmt: skip
        for i in range(2):
            wl.step(first + i)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return prof


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def one(cfg: CollectConfig) -> None:
    device = resolve_device(cfg)
    wl = build_workload(cfg, device)
    for i in range(3):  # warm-up
        wl.step(i)
    ours_p, torch_p = _profiled(wl, device, 3), _profiled(wl, device, 5)
    ours, t_ours = _timed(profiler_flops_rows, ours_p)
    theirs, t_theirs = _timed(key_averages_rows, ours_p)
    name = f"{cfg.preset} b{cfg.batch} s{cfg.seq} {cfg.dtype}-{cfg.attention}"
    print(f"{name}: FLOP rows equal: {json.dumps(ours) == json.dumps(theirs)} ({len(ours)} rows);"
          f" Kineto events {t_ours:.3f} s, key_averages {t_theirs:.3f} s")  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d) / "ours.pt.trace.json.gz", Path(d) / "torch.pt.trace.json.gz"
        _, t_w = _timed(write_trace, ours_p, a)
        _, t_t = _timed(torch_p.export_chrome_trace, str(b))
        print(f"  trace: write_trace {t_w:.3f} s, {a.stat().st_size / 1e6:.2f} MB; torch's .gz "
              f"export {t_t:.3f} s, {b.stat().st_size / 1e6:.2f} MB")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpt2-small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    a = p.parse_args()
    for dtype, attention in (("bf16", "sdpa"), ("fp32", "naive")):
        if a.device == "cpu" and dtype == "bf16":
            continue
        one(CollectConfig(preset=a.preset, device=a.device, dtype=dtype, attention=attention,
                          batch=a.batch, seq=a.seq))  # fmt: skip


if __name__ == "__main__":
    main()

"""Hardware counters: replay one training step of a run under Nsight Compute (``ncu``).

``tracekit collect --counters`` runs, after the run folder is complete::

    ncu --profile-from-start off --clock-control none --target-processes all \
        --filter-mode per-launch-config --launch-count 1 --csv --page raw \
        --metrics <list> python -m tracekit.collectors.replay <run folder>

The replay process rebuilds the run's workload from its manifest (same seed, model,
dtype, attention, compile), warms it up, and brackets exactly one step with
``cudaProfilerStart``/``cudaProfilerStop``. ``per-launch-config`` with ``--launch-count 1``
profiles the first launch of every distinct launch configuration (function, grid, block,
shared memory) once: the eleven repeats of a GPT block's kernels are not replayed again,
which keeps a GPT-2-small step to well under a minute; the analysis stage extrapolates
each measured row to the trace's kernels of the same signature and says so. Clocks are
left as they are (``--clock-control none``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracekit.errors import DeviceError, TracekitError
from tracekit.io import atomic_write_bytes, atomic_write_json

COUNTERS_CSV = "counters.csv"

# SIMT floating-point instructions (an FMA is two FLOPs), memory traffic and duration.
SIMT_METRICS = [
    f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
    for p in ("f", "h", "d")
    for op in ("add", "mul", "fma")
]
MEMORY_METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum"]
TIME_METRIC = "gpu__time_duration.sum"
# Device constants (no extra replay passes) that give the L2 and DRAM roofs of the
# hierarchical roofline: bytes per cycle at peak times cycles per second.
PEAK_METRICS = [
    "lts__t_bytes.sum.peak_sustained",
    "lts__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__cycles_elapsed.avg.per_second",
]
# Tensor-pipe operation counters differ by chip (e.g. ..._op_hgmma_... on Hopper); the ones
# the device has are picked from `ncu --query-metrics` (see available_tensor_metrics).
TENSOR_PREFIX = "sm__ops_path_tensor"
TENSOR_SOURCES = ("bf16", "fp16", "tf32", "fp8", "fp64", "e4m3", "e5m2")


def available_tensor_metrics(ncu: str) -> list[str]:
    """The device's tensor-pipe op counters by source type, as ``<name>.sum``."""
    out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    names = set()
    for line in out.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(TENSOR_PREFIX) and any(f"src_{s}" in name for s in TENSOR_SOURCES):
            if "sparsity_on" in name or "_pred_" in name:
                continue
            names.add(name)
    return sorted(f"{n}.sum" for n in names)


def default_metrics(ncu: str) -> list[str]:
    return [
        *available_tensor_metrics(ncu),
        *SIMT_METRICS,
        *MEMORY_METRICS,
        TIME_METRIC,
        *PEAK_METRICS,
    ]


def ncu_command(run_dir: Path, metrics: Sequence[str], ncu: str = "ncu") -> list[str]:
    return [
        ncu, "--profile-from-start", "off", "--clock-control", "none",
        "--target-processes", "all", "--filter-mode", "per-launch-config",
        "--launch-count", "1", "--csv", "--page", "raw", "--metrics", ",".join(metrics),
        sys.executable, "-m", "tracekit.collectors.replay", str(run_dir),
    ]  # fmt: skip


def run_counters(run_dir: Path, metrics: Sequence[str] | None = None, *,
                 ncu: str | None = None, timeout: float = 600.0) -> dict[str, Any]:  # fmt: skip
    """Replay one step of ``run_dir`` under ncu; write ``counters.csv`` and update the
    manifest's ``artifacts.counters`` and ``counters`` entries. Returns that entry."""
    exe = ncu or shutil.which("ncu")
    if exe is None:
        raise DeviceError("--counters needs Nsight Compute: no 'ncu' on PATH")
    if metrics is None:
        metrics = default_metrics(exe)
    cmd = ncu_command(run_dir, metrics, exe)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    except subprocess.TimeoutExpired:
        raise TracekitError(f"ncu replay took longer than {timeout:.0f} s") from None
    seconds = time.perf_counter() - t0
    csv = _csv_part(proc.stdout)
    if proc.returncode != 0 or not csv:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise TracekitError(f"ncu replay failed (exit {proc.returncode}): {tail}")
    atomic_write_bytes(run_dir / COUNTERS_CSV, csv.encode())
    entry = {
        "csv": COUNTERS_CSV,
        "replay_seconds": round(seconds, 2),
        "profiled_launches": max(0, csv.count("\n") - 2),  # header + units rows
        "metrics": list(metrics),
        "command": " ".join(cmd),
        "method": "one step replayed; first launch of each distinct launch configuration "
        "(ncu --filter-mode per-launch-config --launch-count 1)",
    }
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest.setdefault("artifacts", {})["counters"] = COUNTERS_CSV
    manifest["counters"] = entry
    atomic_write_json(mpath, manifest)
    return entry


def _csv_part(stdout: str) -> str:
    """ncu prints its own '==PROF==' lines and the program's output around the CSV."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    return "\n".join(lines) + ("\n" if lines else "")


def replay(run_dir: Path) -> None:
    """Rebuild the run's workload, warm up, and profile exactly one step."""
    import torch

    from tracekit.collectors.config import CollectConfig
    from tracekit.collectors.profiler import ProfilerConfig
    from tracekit.collectors.train import build_workload

    manifest = json.loads((run_dir / "manifest.json").read_text())
    c = dict(manifest["config"])
    for key in ("model", "out"):
        c.pop(key, None)
    c["profiler"] = ProfilerConfig(
        **{k: v for k, v in c["profiler"].items() if k in ProfilerConfig.__dataclass_fields__}
    )
    c["data"] = Path(c["data"]) if c.get("data") else None
    cfg = CollectConfig(**{k: v for k, v in c.items() if k in CollectConfig.__dataclass_fields__})
    device = torch.device("cuda")
    wl = build_workload(cfg, device)
    for i in range(max(cfg.warmup, 2)):
        wl.step(i)
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    wl.step(cfg.warmup)
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()


if __name__ == "__main__":
    replay(Path(sys.argv[1]))

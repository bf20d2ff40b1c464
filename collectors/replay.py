"""Hardware counters: replay one training step of a run under Nsight Compute (``ncu``).

``tracekit collect --counters`` runs, after the run folder is complete::

    ncu --profile-from-start off --clock-control none --target-processes all \
        --filter-mode per-launch-config --launch-count 1 --csv --page raw \
        --metrics <list> python -m tracekit.collectors.replay <run folder>

The replay process rebuilds the run's workload from its manifest (same seed, model,
dtype, attention, compile), warms it up, and brackets exactly one step with
``cudaProfilerStart``/``cudaProfilerStop``. ``per-launch-config`` with ``--launch-count 1``
profiles the first launch of every distinct launch configuration (function, grid, block,
shared memory) once: the eleven repeats of a GPT block's kernels are not replayed again;
the analysis stage extrapolates each measured row to the trace's kernels of the same
signature and says so.

That extrapolation is wrong for matrix multiplies: cuBLAS runs one kernel with one grid
for GEMMs of different depth K (a forward projection and a weight gradient, say), so their
FLOPs differ while the launch configuration is the same. A second pass therefore profiles
*every* GEMM launch (``--kernel-name regex:`` :data:`GEMM_KERNELS`) of the first
transformer block and of the LM head, forward and backward: module hooks bracket them with
``cudaProfilerStart``/``Stop`` (``replay --sample``; a compiled model has every GEMM launch
of the step profiled instead). The rows go to ``counters-gemm.csv``; the analysis aligns
them with the trace in launch order and extrapolates them to the other blocks' GEMMs by
kernel *and operator shapes*, before anything falls back to the first pass. Clocks are left
as they are (``--clock-control none``) in both passes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.errors import DeviceError, TracekitError
from tracekit.io import atomic_write_bytes
from tracekit.manifest import MANIFEST, write_manifest

COUNTERS_CSV = "counters.csv"
GEMM_CSV = "counters-gemm.csv"
# Matrix-multiply kernels whose every launch is profiled (ncu regex on the demangled name):
# cuBLAS/cuBLASLt (sgemm, xmma_gemm, gemv, splitKreduce), CUTLASS (…gemm…), nvjet (Hopper).
GEMM_KERNELS = "[Gg]em[mv]|nvjet|splitKreduce"

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


def tensor_metrics(names: Sequence[str]) -> list[str]:
    """The tensor-pipe op counters to collect, by source type, as ``<name>.sum``.

    Only the broadest counter of each source: chips also list per-instruction parts
    (``sm__ops_path_tensor_op_hgmma_src_…``) and ``…_sparsity_off`` parts of the same
    operations, which add replay passes but no information (the analysis would not sum
    them anyway; see tracekit.classify.counters)."""
    found = {
        n
        for n in names
        if n.startswith(TENSOR_PREFIX)
        and any(f"src_{s}" in n for s in TENSOR_SOURCES)
        and "sparsity_on" not in n
        and "_pred_" not in n
    }

    def broader(n: str) -> set[str]:  # the counters that contain n's operations
        out = set()
        if n.endswith("_sparsity_off"):
            out.add(n.removesuffix("_sparsity_off"))
        if m := re.match(rf"{TENSOR_PREFIX}_op_[a-z0-9]+_(src_.*)", n):
            out.add(f"{TENSOR_PREFIX}_{m[1]}")
        if m := re.match(r"(.*_src_[a-z0-9]+)_dst_[a-z0-9]+(.*)", n):
            out.add(m[1] + m[2])
        return out | {a for b in out for a in broader(b)}

    keep = {n for n in found if not broader(n) & found}
    return sorted(f"{n}.sum" for n in keep)


def available_tensor_metrics(ncu: str) -> list[str]:
    """:func:`tensor_metrics` of the device (``ncu --query-metrics``)."""
    out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120)
    return tensor_metrics([line.split()[0] for line in out.stdout.splitlines() if line.split()])


def default_metrics(ncu: str) -> list[str]:
    return [
        *available_tensor_metrics(ncu),
        *SIMT_METRICS,
        *MEMORY_METRICS,
        TIME_METRIC,
        *PEAK_METRICS,
    ]


def ncu_command(
    run_dir: Path,
    metrics: Sequence[str],
    ncu: str = "ncu",
    *,
    gemm: bool = False,
    sample: bool = False,
    target: Sequence[str] | None = None,
) -> list[str]:
    """The first pass (``gemm=False``): the first launch of each launch configuration.
    The GEMM pass (``gemm=True``): every launch of a kernel matching :data:`GEMM_KERNELS`,
    within the first transformer block and the LM head if ``sample`` (see :func:`replay`).
    ``target``: the program ncu runs (default: :func:`replay` of ``run_dir``; ``tracekit
    run`` gives its script replay)."""
    if target is None:
        target = [sys.executable, "-m", "tracekit.collectors.replay", str(run_dir),
                  *(["--sample"] if sample else [])]  # fmt: skip
    select = (
        ["--kernel-name-base", "demangled", "--kernel-name", f"regex:{GEMM_KERNELS}"]
        if gemm
        else ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    )
    return [
        ncu, "--profile-from-start", "off", "--clock-control", "none",
        "--target-processes", "all", *select, "--csv", "--page", "raw",
        "--metrics", ",".join(metrics), *target,
    ]  # fmt: skip


def _replay_csv(cmd: list[str], timeout: float, *, may_be_empty: bool = False,
                env: Mapping[str, str] | None = None) -> tuple[str, float]:  # fmt: skip
    """Run one ncu pass; return its CSV text and the seconds it took. ``may_be_empty``:
    a pass whose kernel filter matched nothing gives ``""`` instead of an error."""
    t0 = time.perf_counter()
    try:
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=environ)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise TracekitError(f"ncu replay took longer than {timeout:.0f} s") from None
    seconds = time.perf_counter() - t0
    csv = _csv_part(proc.stdout)
    if proc.returncode == 0 and not csv and may_be_empty:
        return "", seconds
    if proc.returncode != 0 or not csv:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise TracekitError(f"ncu replay failed (exit {proc.returncode}): {tail}")
    return csv, seconds


def _rows(csv: str) -> int:
    return max(0, csv.count("\n") - 2)  # header + units rows


def run_counters(run_dir: Path, metrics: Sequence[str] | None = None, *,
                 ncu: str | None = None, timeout: float = 600.0,
                 gemm: bool = True, target: Sequence[str] | None = None,
                 env: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Replay one step of ``run_dir`` under ncu; write ``counters.csv`` (and, with ``gemm``,
    ``counters-gemm.csv``) and update the manifest's ``artifacts`` and ``counters`` entries.
    Returns the ``counters`` entry. Nothing is written unless every pass succeeds.

    ``target`` (and ``env``): the program that replays the step (default: this module's
    :func:`replay` of a ``collect`` run); its GEMM pass profiles every GEMM launch of the
    step, as nothing tells which launches belong to one block of an unknown model."""
    exe = ncu or shutil.which("ncu")
    if exe is None:
        raise DeviceError("--counters needs Nsight Compute: no 'ncu' on PATH")
    if metrics is None:
        metrics = default_metrics(exe)
    cmd = ncu_command(run_dir, metrics, exe, target=target)
    csv, seconds = _replay_csv(cmd, timeout, env=env)
    entry: dict[str, Any] = {
        "csv": COUNTERS_CSV,
        "replay_seconds": round(seconds, 2),
        "profiled_launches": _rows(csv),
        "metrics": list(metrics),
        "command": " ".join(cmd),
        "method": "one step replayed; first launch of each distinct launch configuration "
        "(ncu --filter-mode per-launch-config --launch-count 1)",
    }
    if _is_generate(run_dir):
        entry["method"] = entry["method"].replace(
            "one step replayed", "the prefill and the first decode step replayed"
        )
    gemm_csv = None
    if gemm:
        config = json.loads((run_dir / MANIFEST).read_text()).get("config", {})
        # torch.compile'd models run their blocks inside compiled graphs, where module
        # hooks do not bracket the launches: profile every GEMM launch of the step there.
        sample = target is None and not config.get("compile", False)
        gcmd = ncu_command(run_dir, metrics, exe, gemm=True, sample=sample, target=target)
        gemm_csv, gseconds = _replay_csv(gcmd, timeout, may_be_empty=True, env=env)
        entry["gemm"] = {
            "csv": GEMM_CSV if gemm_csv else None,  # None: the step has no GEMM kernel
            "replay_seconds": round(gseconds, 2),
            "profiled_launches": _rows(gemm_csv),
            "kernel_regex": GEMM_KERNELS,
            "command": " ".join(gcmd),
            "method": (
                "the same step replayed again; every GEMM launch of the first transformer "
                "block and the LM head (forward and backward), extrapolated to the other "
                "blocks by kernel and operator shapes"
                if sample
                else "the same step replayed again; every GEMM launch"
            ),
        }
        entry["replay_seconds_total"] = round(seconds + gseconds, 2)
    atomic_write_bytes(run_dir / COUNTERS_CSV, csv.encode())
    mpath = run_dir / MANIFEST
    manifest = json.loads(mpath.read_text())
    arts = manifest.setdefault("artifacts", {})
    arts["counters"] = COUNTERS_CSV
    if gemm_csv:
        atomic_write_bytes(run_dir / GEMM_CSV, gemm_csv.encode())
        arts["counters_gemm"] = GEMM_CSV
    else:
        arts.pop("counters_gemm", None)
    manifest["counters"] = entry
    write_manifest(mpath, manifest)
    return entry


def _is_generate(run_dir: Path) -> bool:
    config = json.loads((run_dir / MANIFEST).read_text()).get("config", {})
    return bool(config.get("workload") == "generate")


def _csv_part(stdout: str) -> str:
    """ncu prints its own '==PROF==' lines and the program's output around the CSV."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    return "\n".join(lines) + ("\n" if lines else "")


def _replay_generate(cfg: Any, device: Any, *, sample: bool) -> None:
    """A generate run's replay: after warm-up generations, the prefill and the first
    decode step (with ``sample``: only what the first block and the LM head launch)."""
    import torch

    from tracekit.collectors.generate import build_generator, generate

    gen = build_generator(cfg, device)
    for i in range(max(cfg.warmup, 1)):
        generate(gen, i)
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    if sample:
        for m in (gen.model.blocks[0], gen.model.lm_head):
            _bracket(m, cudart.cudaProfilerStart, cudart.cudaProfilerStop, backward=False)
    else:
        cudart.cudaProfilerStart()
    generate(gen, cfg.warmup, decode_steps=1)
    torch.cuda.synchronize()
    if not sample:
        cudart.cudaProfilerStop()


def _bracket(module: Any, start: Any, stop: Any, *, backward: bool = True) -> None:
    """Profile what ``module`` launches: its forward and its backward, each between
    ``cudaProfilerStart`` and ``cudaProfilerStop`` (process-wide, so the backward pass's
    launches from the autograd thread are bracketed too)."""

    # A hook's return value would replace the module's inputs, outputs or gradients, and
    # cudaProfilerStart/Stop return a cudaError: call them, return None.
    def on(*_: Any) -> None:
        start()

    def off(*_: Any) -> None:
        stop()

    module.register_forward_pre_hook(on)
    module.register_forward_hook(off)
    if backward:
        module.register_full_backward_pre_hook(on)
        module.register_full_backward_hook(off)


def replay(run_dir: Path, *, sample: bool = False) -> None:
    """Rebuild the run's workload, warm up, and profile exactly one step.

    ``sample``: profile only what the first transformer block and the LM head launch
    (forward and backward). The other blocks are identical, so their GEMMs have the same
    shapes and kernels; the analysis extrapolates by kernel and operator shapes."""
    import torch

    from tracekit.collectors.config import config_from_dict
    from tracekit.collectors.train import build_workload

    manifest = json.loads((run_dir / MANIFEST).read_text())
    cfg = config_from_dict(manifest["config"])
    device = torch.device("cuda")
    if cfg.workload == "generate":
        _replay_generate(cfg, device, sample=sample)
        return
    wl = build_workload(cfg, device)
    for i in range(max(cfg.warmup, 2)):
        wl.step(i)
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    if sample:
        model = wl.model
        for m in (model.blocks[0], model.lm_head):  # type: ignore[index]
            _bracket(m, cudart.cudaProfilerStart, cudart.cudaProfilerStop)
        wl.step(cfg.warmup)
        torch.cuda.synchronize()
        return
    cudart.cudaProfilerStart()
    wl.step(cfg.warmup)
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()


if __name__ == "__main__":
    replay(Path(sys.argv[1]), sample="--sample" in sys.argv[2:])

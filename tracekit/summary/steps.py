"""Step times, GPU idle share and the launch-bound check, from the parsed tables.

Definitions (docs/report.md repeats them):

* A step's **time** is ``max(cpu_dur, gpu_dur)``: the longer of its ``ProfilerStep#N``
  CPU span and the span from its first to its last GPU activity. When the GPU is the
  bottleneck the CPU runs ahead and the GPU span is the step's real period; when the host
  is, the GPU span shrinks inside the CPU span.
* **GPU idle** is ``1 - gpu_busy / time`` (``gpu_busy``: union of the step's GPU activity
  intervals, all streams). Over several steps: ``1 - sum(busy) / sum(time)``.
* **Launch-bound**: the GPU idles at least :data:`IDLE_PCT` % of the step time (of the
  unprofiled step time when the run's manifest has it, see :func:`launch_check`), the host
  is busy for at least :data:`HOST_PCT` % of it (so the host, not an external wait, is
  the critical path), and the kernels are short: the median kernel runs for less than
  :data:`SHORT_KERNEL_NS`, or at least half of the kernels run for less than their own
  launch call. Then the GPU waits for launches and fewer, larger kernels (CUDA graphs,
  ``torch.compile``, a larger batch) help.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

IDLE_PCT = 20.0
HOST_PCT = 90.0
# Typical cudaLaunchKernel cost is ~2-5 us (NVIDIA CUDA C++ Best Practices Guide, "Kernel
# launch overhead"); a kernel shorter than ~10 us cannot hide the launch of the next one.
SHORT_KERNEL_NS = 10_000

LAUNCH_APIS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "cudaLaunchCooperativeKernel",
)


def analysed_steps(steps: pd.DataFrame) -> list[int]:
    """The steps the report covers: every ``ProfilerStep#N`` in the trace (a trace without
    step markers is one step, number 0)."""
    return sorted(int(s) for s in steps["step"] if int(s) >= 0)


def step_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per analysed step: ``step``, ``cpu_ms``, ``gpu_span_ms``, ``gpu_busy_ms``,
    ``step_time_ms``, ``gpu_idle_pct``, ``kernel_count``."""
    s = steps[steps["step"] >= 0].sort_values("step")
    cpu = s["cpu_dur"].to_numpy(dtype=np.float64)
    gpu = s["gpu_dur"].astype("float64").fillna(0.0).to_numpy()
    busy = s["gpu_busy"].to_numpy(dtype=np.float64)
    time = np.maximum(cpu, gpu)
    with np.errstate(invalid="ignore", divide="ignore"):
        idle = np.where(time > 0, 100.0 * (1.0 - busy / time), np.nan)
    frame: pd.DataFrame = pd.DataFrame(
        {
            "step": s["step"].to_numpy(dtype=np.int64),
            "cpu_ms": cpu / 1e6,
            "gpu_span_ms": gpu / 1e6,
            "gpu_busy_ms": busy / 1e6,
            "step_time_ms": time / 1e6,
            "gpu_idle_pct": idle,
            "kernel_count": s["kernel_count"].to_numpy(dtype=np.int64),
        }
    )
    return frame


@dataclass(frozen=True)
class LaunchCheck:
    gpu_idle_pct: float | None
    gpu_idle_unprofiled_pct: float | None  # 1 - busy / unprofiled step time (manifest)
    host_busy_pct: float | None
    kernels_per_step: float
    median_kernel_us: float | None
    median_launch_us: float | None
    shorter_than_launch_pct: float | None
    short_kernels: bool  # median < SHORT_KERNEL_NS, or half shorter than their launch
    launch_bound: bool
    message: str | None


def gpu_idle_pct(table: pd.DataFrame) -> float | None:
    """GPU idle share over the analysed steps (None when no step has a duration, or the
    steps have no GPU activity at all: a CPU-only trace has no GPU to be idle)."""
    time = float(table["step_time_ms"].sum())
    if time <= 0 or int(table["kernel_count"].sum()) == 0:
        return None
    return 100.0 * (1.0 - float(table["gpu_busy_ms"].sum()) / time)


def launch_check(
    table: pd.DataFrame,
    kernels: pd.DataFrame,
    runtime: pd.DataFrame,
    measured_step_ms: float | None = None,
) -> LaunchCheck:
    """GPU idle share and whether the analysed steps are launch-bound (see module doc).

    ``measured_step_ms``: the run's step time measured without the profiler (manifest).
    The profiler adds host time to every operator call, so a traced step can look
    host-bound when the real one is not; with the unprofiled step time the decision uses
    the GPU idle share of the *unprofiled* step, ``1 - busy / measured`` (kernel durations
    barely change under the profiler, host time does)."""
    sel = set(int(s) for s in table["step"])
    # only the columns used: kernel names are long, copying them would cost more than this
    k = kernels[[c for c in ("dur", "runtime_id") if c in kernels]]
    k = k[(kernels["step"].isin(sel) & (kernels["kind"] == "kernel")).to_numpy()]
    idle = gpu_idle_pct(table)
    time = float(table["step_time_ms"].sum())
    host = 100.0 * float(table["cpu_ms"].sum()) / time if time > 0 else None
    n_steps = max(1, len(table))
    busy = float(table["gpu_busy_ms"].mean()) if len(table) else 0.0
    idle_unprofiled = (
        max(0.0, 100.0 * (1.0 - busy / measured_step_ms))
        if measured_step_ms and measured_step_ms > 0 and idle is not None
        else None
    )
    med_k = float(np.median(k["dur"].to_numpy())) / 1e3 if len(k) else None
    launches = runtime[["dur"]][runtime["name"].isin(LAUNCH_APIS) & runtime["step"].isin(sel)]
    med_l = float(np.median(launches["dur"].to_numpy())) / 1e3 if len(launches) else None
    shorter: float | None = None
    if len(k) and "runtime_id" in k and len(runtime):
        rid = k["runtime_id"].to_numpy()
        ok = rid >= 0
        if ok.any():
            ldur = runtime["dur"].to_numpy()[rid[ok]]
            shorter = 100.0 * float(np.mean(k["dur"].to_numpy()[ok] < ldur))
    short = (med_k is not None and med_k * 1e3 < SHORT_KERNEL_NS) or (
        shorter is not None and shorter >= 50.0
    )
    idle_used = idle_unprofiled if idle_unprofiled is not None else idle
    bound = bool(
        idle_used is not None
        and idle_used >= IDLE_PCT
        and host is not None
        and host >= HOST_PCT
        and short
    )
    msg = None
    if bound:
        assert idle_used is not None and med_k is not None
        launch_txt = f" vs {med_l:.1f} µs per launch call" if med_l is not None else ""
        where = (
            f"of the step measured without the profiler ({measured_step_ms:.2f} ms)"
            if idle_unprofiled is not None
            else "of the step"
        )
        msg = (
            f"launch-bound: the GPU idles {idle_used:.0f} % {where} while the host is busy "
            f"for all of it; {len(k) / n_steps:.0f} kernels per step, median "
            f"{med_k:.1f} µs{launch_txt}. Fewer, larger kernels help: CUDA graphs, "
            "torch.compile (mode='reduce-overhead'), a larger batch."
        )
    return LaunchCheck(
        gpu_idle_pct=idle,
        gpu_idle_unprofiled_pct=idle_unprofiled,
        host_busy_pct=host,
        kernels_per_step=len(k) / n_steps,
        median_kernel_us=med_k,
        median_launch_us=med_l,
        shorter_than_launch_pct=shorter,
        short_kernels=bool(short),
        launch_bound=bound,
        message=msg,
    )

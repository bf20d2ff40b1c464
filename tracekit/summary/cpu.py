"""A CPU run's summary: how busy the operators keep each thread, and the verdict.

On a CPU run (:func:`tracekit.parse.cpuview.cpu_view`) the kernels are the work operators,
so the step splits as on a GPU — the union of the work operators' intervals is the *operator
work*, the rest of the step *framework overhead* (Python, the dispatcher, the autograd
engine, the optimizer's Python loop, and the profiler's own bookkeeping), less *input wait*
(DataLoader spans outside the operators) and exposed communication (gloo collectives with
no other operator beside them). Nothing waits for launches: there is no GPU to be idle.

Definitions (docs/report.md, "CPU runs"):

* **operator busy** per thread = the summed time of the thread's work operators (they never
  nest, so this is their union) over the summed step time; overall, the union over threads;
* the **breakdown** is of the *profiled* step: the profiler lengthens the operators too
  (record_shapes, profile_memory), so the trace's operator time does not fit the step
  measured without it; the manifest's profiler overhead is quoted beside it;
* the **verdict**: framework overhead + input wait + exposed communication ≥
  :data:`~tracekit.summary.verdict.OUTSIDE_PCT` % of the step → the largest decides
  (**framework-overhead-bound**, **input-bound**, **communication-bound**); otherwise the
  operators bound the step and their roofline — against the CPU's measured ceilings —
  decides **compute-bound** or **memory-bandwidth-bound** exactly as for a GPU's kernels;
  without a roofline or FLOP/byte counts, **unknown** with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.steps as S
import tracekit.summary.verdict as V
from tracekit.manifest import manifest_or_empty

FRAMEWORK = "framework-overhead-bound"
# a CPU run has no launches: the GPU launch check does not apply
NO_LAUNCH = S.LaunchCheck(
    gpu_idle_pct=None,
    gpu_idle_unprofiled_pct=None,
    host_busy_pct=None,
    kernels_per_step=0.0,
    median_kernel_us=None,
    median_launch_us=None,
    shorter_than_launch_pct=None,
    short_kernels=False,
    launch_bound=False,
    message=None,
)
CRITICAL_PATH_NOTE = (
    "critical path: not computed on a CPU run (it models launches, GPU streams and the "
    "host waiting for them; on the CPU the step is its threads' own timeline: the "
    "operator table and the per-thread busy time say where it goes)"
)
# summary.json's sources that read differently on a CPU run
SOURCES = {
    "time_share_pct": "measured: work operators' durations in the trace (CPU run)",
    "flop_share_pct": "FLOP counts per work operator: share of CPU operator time by source "
    "(profiler: with_flops; modelled: tracekit from shapes; none: unknown)",
    "bound_time_share_pct": "modelled: each work operator's arithmetic intensity against the "
    "CPU's ridge point (its measured ceilings)",
    "step_time_ms": "measured: ProfilerStep spans in the trace (with the profiler on)",
    "gpu_idle_pct": None,
    "gpu_idle_unprofiled_pct": None,
    "cpu": "measured: union of the work operators' intervals per step and thread",
}


@dataclass(frozen=True)
class CpuUtilisation:
    """How busy the work operators keep the threads over the analysed steps."""

    busy_pct: float | None  # union over threads of operator time / step time
    overhead_pct: float | None  # the rest of the step: framework, Python, profiler
    ops_per_step: float
    median_op_us: float | None
    threads: pd.DataFrame  # tid, ops_per_step, busy_ms_per_step, busy_pct
    intra_op_threads: int | None  # the run's torch.get_num_threads() (manifest)
    profiler_overhead_pct: float | None  # profiled vs unprofiled step (manifest)

    def to_dict(self, breakdown: V.Breakdown | None = None) -> dict[str, Any]:
        """summary.json's ``cpu`` block (``breakdown``: the step the verdict split)."""
        return {
            "shares_basis": breakdown.basis if breakdown is not None else None,
            "shares_step_ms": breakdown.step_ms if breakdown is not None else None,
            "operator_busy_pct": self.busy_pct,
            "framework_overhead_pct": self.overhead_pct,
            "work_ops_per_step": self.ops_per_step,
            "median_op_us": self.median_op_us,
            "threads": self.threads.to_dict("records"),
            "intra_op_threads": self.intra_op_threads,
            "profiler_overhead_pct": self.profiler_overhead_pct,
        }


def utilisation(kernels: pd.DataFrame, table: pd.DataFrame, manifest: Any) -> CpuUtilisation:
    """:class:`CpuUtilisation` from a CPU view's kernels (the work operators) and the step
    table (``tracekit.summary.steps.step_table`` of the view's steps)."""
    sel = kernels["step"].isin(table["step"]).to_numpy()
    k = kernels[["stream", "dur"]][sel]
    n = max(1, len(table))
    time_ms = float(table["step_time_ms"].sum())
    busy_ms = float(table["gpu_busy_ms"].sum())
    busy = 100.0 * busy_ms / time_ms if time_ms > 0 else None
    g = k.groupby("stream")["dur"].agg(["size", "sum"])
    threads: pd.DataFrame = pd.DataFrame(
        {
            "tid": g.index.to_numpy(dtype=np.int64),
            "ops_per_step": g["size"].to_numpy(dtype=float) / n,
            "busy_ms_per_step": g["sum"].to_numpy(dtype=float) / 1e6 / n,
            "busy_pct": (
                100.0 * g["sum"].to_numpy(dtype=float) / 1e6 / time_ms
                if time_ms > 0
                else np.full(len(g), np.nan)
            ),
        }
    ).sort_values("busy_ms_per_step", ascending=False, kind="stable", ignore_index=True)
    man = manifest_or_empty(manifest if isinstance(manifest, dict) else None)
    threads_n = man.device_threads
    overhead = man.metrics.profiler_overhead_pct
    return CpuUtilisation(
        busy_pct=busy,
        overhead_pct=100.0 - busy if busy is not None else None,
        ops_per_step=len(k) / n,
        median_op_us=float(np.median(k["dur"].to_numpy())) / 1e3 if len(k) else None,
        threads=threads,
        intra_op_threads=int(threads_n) if threads_n is not None else None,
        profiler_overhead_pct=float(overhead) if overhead is not None else None,
    )


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "unknown" if v is None or not math.isfinite(v) else f"{v:{fmt}}"


def shares(b: V.Breakdown) -> dict[str, float]:
    """The breakdown's shares under a CPU run's names."""
    s = b.shares_pct()
    return {
        "operator_work": s["gpu_work"],
        "exposed_communication": s["exposed_communication"],
        "input_wait": s["input_wait"],
        "framework_overhead": s["host_idle"],
    }


def decide(b: V.Breakdown, e: V.Evidence, cu: CpuUtilisation) -> V.Verdict:
    """The verdict of a CPU run's step (see the module doc)."""
    s = shares(b)
    head = (
        f"operator work {s['operator_work']:.1f} %, exposed communication "
        f"{s['exposed_communication']:.1f} %, input wait {s['input_wait']:.1f} %, framework "
        f"overhead {s['framework_overhead']:.1f} % of the {b.basis} {b.step_ms:.2f} ms step "
        f"({len(cu.threads)} thread(s) run operators)"
    )
    if b.outside_pct >= V.OUTSIDE_PCT:
        parts = {
            "communication-bound": s["exposed_communication"],
            "input-bound": s["input_wait"],
            FRAMEWORK: s["framework_overhead"],
        }
        which = max(parts, key=lambda k: parts[k])
        text, lever = _OUTSIDE[which](b, cu)
        text.append(_work_words(e))
    else:
        which, text, lever = _operators_bound(b, e, cu)
    if cu.profiler_overhead_pct is not None and cu.profiler_overhead_pct > 0:
        text.append(
            f"the profiler lengthened the step by {cu.profiler_overhead_pct:.0f} % (manifest: "
            "profiled vs unprofiled step); its bookkeeping lands mostly between operators, so "
            "the framework-overhead share is an upper bound"
        )
    return V.Verdict(which, [head, *text], lever, s, b.basis)


def _work_words(e: V.Evidence) -> str:
    mem = e.bound_pct.get("memory-bound") or 0.0
    comp = e.bound_pct.get("compute-bound") or 0.0
    return (
        f"the operators themselves: {mem:.1f} % of operator time memory-bound, {comp:.1f} % "
        "compute-bound"
    )


def _framework(b: V.Breakdown, cu: CpuUtilisation) -> tuple[list[str], str]:
    return (
        [
            f"{b.host_idle_ms:.2f} ms per step run outside the operators' work (Python, "
            f"dispatcher, autograd engine); {cu.ops_per_step:.0f} work operators per step, "
            f"median {_f(cu.median_op_us)} µs"
        ],
        "fewer, larger operators and less Python per step: torch.compile (fused C++/OpenMP "
        "kernels, far less dispatch), a larger batch, a foreach optimizer (foreach=True), "
        "no .item()/.tolist() or Python loops over tensors inside the step",
    )


def _input(b: V.Breakdown, cu: CpuUtilisation) -> tuple[list[str], str]:
    return (
        [
            f"{b.input_wait_ms:.2f} ms per step are spent loading data outside the operators "
            "(DataLoader __next__ spans)"
        ],
        "load data ahead of the step: DataLoader(num_workers>0, persistent_workers=True, "
        "prefetch_factor), lighter preprocessing",
    )


def _comm(b: V.Breakdown, cu: CpuUtilisation) -> tuple[list[str], str]:
    return (
        [f"collectives run with no other operator beside them for {b.exposed_comm_ms:.2f} ms"],
        "overlap or shrink communication: DDP bucket_cap_mb and gradient hooks, fewer and "
        "larger collectives, more work per rank",
    )


_OUTSIDE: dict[str, Callable[[V.Breakdown, CpuUtilisation], tuple[list[str], str]]] = {
    "communication-bound": _comm,
    "input-bound": _input,
    FRAMEWORK: _framework,
}


def _operators_bound(
    b: V.Breakdown, e: V.Evidence, cu: CpuUtilisation
) -> tuple[str, list[str], str]:
    """The operators bound the step: their roofline decides (the GPU rule, CPU words)."""
    which = V._gpu_bound(b, e)[0]  # one decision rule for kernels and CPU operators
    mem = e.bound_pct.get("memory-bound") or 0.0
    comp = e.bound_pct.get("compute-bound") or 0.0
    if which == "unknown":
        why, lever = V.unknown_bound(
            e,
            "a roofline for this CPU (its ceilings not measured)",
            "measure the CPU's ceilings (tracekit run/collect without --no-ceilings) or give "
            "--peak-tflops and --bandwidth",
        )
        return (
            which,
            [f"the operators do the work, but {why} nothing tells compute- from memory-bound"],
            lever,
        )
    text = [
        f"{mem:.1f} % of operator time in memory-bound operators, {comp:.1f} % in "
        "compute-bound ones (intensity against the ridge point of the CPU's measured roofs)"
    ]
    if e.intensity is not None and e.ridge is not None:
        side = "below" if e.intensity < e.ridge else "above"
        text.append(
            f"step intensity {e.intensity:.1f} FLOP/B, {side} the ridge point {e.ridge:.1f} "
            f"of {e.pipe}"
        )
        if which != "unknown" and not which.startswith("memory" if side == "below" else "comp"):
            text.append(
                f"verdict and step intensity differ: the verdict weighs operator time "
                f"({mem:.1f} % memory-bound), the step intensity pools every operator's "
                "FLOPs and bytes, so the few operators that hold most of them decide it"
            )
    threads = f" (this run used {cu.intra_op_threads})" if cu.intra_op_threads else ""
    if which == "memory-bandwidth-bound":
        text.append(
            f"the step moves {_f(e.bandwidth_utilisation_pct)} % of the measured copy "
            f"bandwidth; memory-bound operators run at {_f(e.memory_bound_roof_pct)} % of it"
        )
        return (
            which,
            text,
            "fewer bytes: fuse elementwise chains (torch.compile), in-place operations, "
            "channels_last for convolutions, bf16 activations",
        )
    text.append(f"the step reaches {_f(e.compute_utilisation_pct)} % of the measured {e.pipe} rate")
    return (
        which,
        text,
        "fewer or cheaper FLOPs: bf16 autocast on the CPU (torch.autocast('cpu', "
        "dtype=torch.bfloat16) on CPUs with AVX-512 BF16 or AMX), every core for the "
        f"matmuls (torch.set_num_threads{threads}), torch.compile; or a GPU",
    )

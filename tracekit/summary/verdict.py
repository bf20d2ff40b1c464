"""The step's verdict: what limits it, the evidence that decided it, and the next lever.

The step time splits into four parts (ms per step, :class:`Breakdown`):

* **GPU work**: time in which a non-communication kernel, memcpy or memset runs;
* **exposed communication**: communication kernels (NCCL, …) running with no other GPU
  activity beside them (the union of the step's communication kernels minus the union of
  every other GPU activity);
* **input wait**: the GPU runs nothing while the host is in data loading — a
  ``enumerate(DataLoader)#…__next__`` span (PyTorch's DataLoader records one per batch) or
  an operator that launches a host-to-device copy (``aten::to``/``copy_`` of a batch);
* **host idle**: the rest of the time in which the GPU runs nothing (launch overhead,
  Python, synchronisations).

With an unprofiled step time (a run folder's manifest) the split is of *that* step: the GPU
busy time comes from the trace (kernel durations barely change under the profiler), the
idle time is ``unprofiled step − busy``, input wait is the trace's, capped at that idle
time, and host idle the remainder. The profiled step's own idle time is inflated by the
profiler's host overhead, so it decides only when nothing else is known.

Decision (thresholds :data:`OUTSIDE_PCT`, :data:`MEMORY_PCT`, :data:`KNOWN_PCT`):

1. If exposed communication + input wait + host idle take at least ``OUTSIDE_PCT`` % of the
   step, the largest of the three decides: **communication-bound**, **input-bound** or
   **launch/host-bound**.
2. Otherwise the step is GPU-bound: **memory-bandwidth-bound** when memory-bound kernels
   (intensity below the ridge point of their precision pipe, from the classify stage) take
   at least ``MEMORY_PCT`` % of the GPU time whose bound is known, else **compute-bound**;
   when less than ``KNOWN_PCT`` % of the GPU time has a known bound, the step's arithmetic
   intensity against the ridge point decides; without either the verdict is ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import tracekit.summary.intervals as I

OUTSIDE_PCT = 20.0  # share of the step outside the GPU's own work that makes it the limit
MEMORY_PCT = 50.0  # share of classified GPU time in memory-bound kernels
KNOWN_PCT = 50.0  # share of GPU time with a known bound needed to use the split

VERDICTS = (
    "compute-bound",
    "memory-bandwidth-bound",
    "launch/host-bound",
    "communication-bound",
    "input-bound",
    "unknown",
)
# PyTorch's DataLoader wraps each __next__ in record_function(f"enumerate(DataLoader)#{cls}
# .__next__") (torch/utils/data/dataloader.py): a user_annotation in the trace
DATALOADER_PREFIX = "enumerate(DataLoader)#"
COMMUNICATION = "communication"


# --------------------------------------------------------------------------- inputs


def input_spans(ops: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Host spans that feed input (``step``, ``ts``, ``end``): DataLoader ``__next__``
    annotations and the outermost operators that launched a host-to-device copy."""
    keep = np.zeros(len(ops), dtype=bool)
    if len(ops):
        keep |= ops["name"].astype(str).str.startswith(DATALOADER_PREFIX).to_numpy()
    if len(ops) and len(kernels) and "top_op_id" in kernels:
        copies = kernels[(kernels["kind"] == "memcpy").to_numpy()]  # names of kernels are long
        h2d = copies["name"].astype(str).str.contains("HtoD", regex=False).to_numpy(dtype=bool)
        keep |= np.isin(ops["op_id"].to_numpy(), copies["top_op_id"].to_numpy()[h2d])
    # arrays, not ops[keep]: the table is wide and long
    ts = ops["ts"].to_numpy(dtype=np.int64)[keep] if len(ops) else np.zeros(0, np.int64)
    frame: pd.DataFrame = pd.DataFrame(
        {
            "step": ops["step"].to_numpy(dtype=np.int64)[keep] if len(ops) else ts,
            "ts": ts,
            "end": ts + (ops["dur"].to_numpy(dtype=np.int64)[keep] if len(ops) else ts),
        }
    )
    return frame


def input_wait_ns(spans: pd.DataFrame, kernels: pd.DataFrame) -> dict[int, int]:
    """Per step: time inside input spans during which no GPU activity runs."""
    if not len(spans):
        return {}
    busy = I.merge(kernels["ts"].to_numpy(), (kernels["ts"] + kernels["dur"]).to_numpy())
    step = spans["step"].to_numpy()
    ts, end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    return {
        int(s): I.uncovered(I.merge(ts[step == s], end[step == s]), busy) for s in np.unique(step)
    }


def exposed_comm_ns(kernels: pd.DataFrame) -> dict[int, int]:
    """Per step: time in which the step's communication kernels run with no other GPU
    activity beside them (``kernels``: classified, with ``class``, ``ts``, ``dur``)."""
    comm = (kernels["class"] == COMMUNICATION).to_numpy()
    if not comm.any():
        return {}
    ts = kernels["ts"].to_numpy(dtype=np.int64)
    end = ts + kernels["dur"].to_numpy(dtype=np.int64)
    other = I.merge(ts[~comm], end[~comm])
    steps = kernels["step"].to_numpy()
    out: dict[int, int] = {}
    for step in np.unique(steps[comm]):
        m = comm & (steps == step)
        out[int(step)] = I.uncovered(I.merge(ts[m], end[m]), other)
    return out


# --------------------------------------------------------------------------- breakdown


@dataclass(frozen=True)
class Breakdown:
    """The mean step split into GPU work, exposed communication, input wait and host idle
    (ms per step, on the ``basis`` step time)."""

    step_ms: float
    basis: str  # 'unprofiled' (manifest step time) or 'profiled'
    busy_ms: float  # union of all GPU activity (trace)
    exposed_comm_ms: float
    input_wait_ms: float
    host_idle_ms: float
    comm_source: str  # 'trace', or where an exposed-communication share came from

    @property
    def gpu_work_ms(self) -> float:
        return max(0.0, self.busy_ms - self.exposed_comm_ms)

    def shares_pct(self) -> dict[str, float]:
        t = self.step_ms
        return {
            "gpu_work": 100.0 * self.gpu_work_ms / t,
            "exposed_communication": 100.0 * self.exposed_comm_ms / t,
            "input_wait": 100.0 * self.input_wait_ms / t,
            "host_idle": 100.0 * self.host_idle_ms / t,
        }

    @property
    def outside_pct(self) -> float:
        s = self.shares_pct()
        return s["exposed_communication"] + s["input_wait"] + s["host_idle"]


def breakdown(
    step_table: pd.DataFrame,
    *,
    measured_step_ms: float | None,
    input_wait: dict[int, int],
    exposed_comm: dict[int, int],
    exposed_comm_pct: tuple[float, str] | None = None,
    comm_ms: tuple[float, str] | None = None,
) -> Breakdown | None:
    """The mean analysed step's :class:`Breakdown` (None without steps or step time).

    ``exposed_comm_pct``: (percent of the step, source) from outside this trace — a
    multi-rank analysis or the manifest's ``metrics.exposed_comm_pct`` — replacing the
    trace's own figure (capped at the GPU busy time, of which it is a part).

    ``comm_ms``: (ms per step, source) of communication measured on the basis step — a
    communication cost measured without the profiler, or the trace's exposed
    communication less a sync wait that is the profiler's — replacing the trace's exposed
    communication *in* the busy time: the GPU work stays the trace's (its busy time less
    its exposed communication), the busy time becomes that work plus this figure (at most
    the step), the rest of the step is idle. Takes precedence over ``exposed_comm_pct``."""
    if not len(step_table):
        return None
    steps = step_table["step"].tolist()
    n = len(steps)
    profiled = float(step_table["step_time_ms"].mean())
    busy = float(step_table["gpu_busy_ms"].mean())
    unprofiled = measured_step_ms is not None and measured_step_ms > 0
    step_ms = float(measured_step_ms) if unprofiled and measured_step_ms else profiled
    if not step_ms > 0:
        return None
    wait = sum(input_wait.get(int(s), 0) for s in steps) / n / 1e6
    trace_comm = sum(exposed_comm.get(int(s), 0) for s in steps) / n / 1e6
    if comm_ms is not None:  # the GPU's own work, plus the outside figure
        ms = max(0.0, comm_ms[0])
        busy = min(step_ms, max(0.0, busy - trace_comm) + ms)
        return _split(step_ms, unprofiled, busy, ms, wait, comm_ms[1])
    if exposed_comm_pct is not None:
        comm, source = exposed_comm_pct[0] / 100.0 * step_ms, exposed_comm_pct[1]
    else:
        comm, source = trace_comm, "trace"
    return _split(step_ms, unprofiled, busy, comm, wait, source)


def _split(
    step_ms: float, unprofiled: bool, busy: float, comm: float, wait: float, source: str
) -> Breakdown:
    """The step split into GPU busy time (its exposed communication at most all of it),
    input wait (at most the idle time) and the rest of the idle time."""
    idle = max(0.0, step_ms - busy)
    wait = min(wait, idle)
    return Breakdown(
        step_ms=step_ms,
        basis="unprofiled" if unprofiled else "profiled",
        busy_ms=busy,
        exposed_comm_ms=min(comm, busy),
        input_wait_ms=wait,
        host_idle_ms=idle - wait,
        comm_source=source,
    )


# --------------------------------------------------------------------------- decision


@dataclass(frozen=True)
class Evidence:
    """What the decision reads besides the breakdown."""

    bound_pct: dict[str, float | None]  # memory-bound / compute-bound / unknown % of GPU time
    intensity: float | None  # the step's FLOPs / bytes
    ridge: float | None  # compute pipe peak / bandwidth roof
    pipe: str | None  # the pipe carrying most FLOPs
    compute_utilisation_pct: float | None
    bandwidth_utilisation_pct: float | None
    memory_bound_roof_pct: float | None  # memory-bound kernels' bytes/time over the roof
    kernels_per_step: float
    median_kernel_us: float | None
    median_launch_us: float | None
    short_kernels: bool  # the launch check's "kernels are short"
    host_busy_pct: float | None
    tensor_peaks: dict[str, float] = field(default_factory=dict)  # tensor-core pipes known
    traced_step: str = "the profiled step"  # the trace step host_busy_pct is a share of


def unknown_bound(e: Evidence, roofline: str, roofs_lever: str) -> tuple[str, str]:
    """Why no bound is known, naming only what is missing — the FLOP and byte counts (no
    shapes), the roofline (``roofline``: which), or else the kernels' own bounds — and the
    lever that adds it (``roofs_lever``: how the roofline is given)."""
    counts, roofs = e.intensity is None, e.ridge is None
    missing = [w for w, m in (("FLOP and byte counts (no shapes)", counts), (roofline, roofs)) if m]
    levers = [
        w for w, m in (("profile with record_shapes=True", counts), (roofs_lever, roofs)) if m
    ]
    if not missing:
        return "with no kernel's bound known,", "profile with record_shapes=True"
    return f"without {' or '.join(missing)}", "; ".join(levers)


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of VERDICTS
    evidence: list[str]
    lever: str
    shares_pct: dict[str, float]
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "evidence": list(self.evidence),
            "next_lever": self.lever,
            "shares_pct": dict(self.shares_pct),
            "basis": self.basis,
            "thresholds": THRESHOLDS,
        }


THRESHOLDS = {"outside_pct": OUTSIDE_PCT, "memory_pct": MEMORY_PCT, "known_pct": KNOWN_PCT}


def _f(v: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "unknown" if v is None or not np.isfinite(v) else f"{v:{fmt}}{unit}"


def _step_words(b: Breakdown) -> str:
    if b.basis == "unprofiled":
        return f"the unprofiled {b.step_ms:.2f} ms step"
    return f"the profiled {b.step_ms:.2f} ms step"


def decide(b: Breakdown, e: Evidence) -> Verdict:
    """The verdict from a step's breakdown and the classify stage's evidence."""
    shares = b.shares_pct()
    if b.outside_pct >= OUTSIDE_PCT:
        parts = {
            "communication-bound": shares["exposed_communication"],
            "input-bound": shares["input_wait"],
            "launch/host-bound": shares["host_idle"],
        }
        which = max(parts, key=lambda k: parts[k])
        text, lever = _OUTSIDE[which](b, e)
        text.append(_gpu_work_words(e))
    else:
        which, text, lever = _gpu_bound(b, e)
    if which != "communication-bound" and b.comm_source != "trace":
        text.insert(0, _comm_words(b))
    head = (
        f"GPU work {shares['gpu_work']:.1f} %, exposed communication "
        f"{shares['exposed_communication']:.1f} %, input wait {shares['input_wait']:.1f} %, "
        f"host idle {shares['host_idle']:.1f} % of {_step_words(b)}"
    )
    return Verdict(which, [head, *text], lever, shares, b.basis)


def _comm_words(b: Breakdown) -> str:
    """Where the exposed communication share came from, when not from this trace."""
    return f"communication {b.exposed_comm_ms:.2f} ms per step: {b.comm_source}"


def _gpu_work_words(e: Evidence) -> str:
    """What limits the GPU work itself: the next limit once the outside part is gone."""
    mem = e.bound_pct.get("memory-bound") or 0.0
    comp = e.bound_pct.get("compute-bound") or 0.0
    return (
        f"the GPU work itself: {mem:.1f} % of GPU time in memory-bound kernels, "
        f"{comp:.1f} % in compute-bound ones"
    )


def _comm(b: Breakdown, e: Evidence) -> tuple[list[str], str]:
    src = "" if b.comm_source == "trace" else f" ({b.comm_source})"
    return (
        [
            f"communication runs with no other GPU work beside it for "
            f"{b.exposed_comm_ms:.2f} ms per step{src}"
        ],
        "overlap communication with compute (DDP bucket_cap_mb and gradient hooks, FSDP "
        "prefetch), fewer and larger collectives, lower-precision gradients (bf16 reduce)",
    )


def _input(b: Breakdown, e: Evidence) -> tuple[list[str], str]:
    return (
        [
            f"the GPU runs nothing for {b.input_wait_ms:.2f} ms per step while the host "
            "loads data (DataLoader __next__ spans, host-to-device copies)"
        ],
        "feed the GPU ahead of time: DataLoader(num_workers>0, pin_memory=True, "
        "persistent_workers=True, prefetch_factor), .to(device, non_blocking=True), "
        "preprocessing on the GPU",
    )


def _host(b: Breakdown, e: Evidence) -> tuple[list[str], str]:
    launch = (
        f"against {_f(e.median_launch_us)} µs per launch call"
        if e.median_launch_us is not None
        else "(no launch call recorded: a kernels-only light pass)"
    )
    kern = (
        f"{e.kernels_per_step:.0f} kernels per step, median {_f(e.median_kernel_us)} µs "
        f"{launch}; host busy {_f(e.host_busy_pct, '.0f')} % of {e.traced_step}"
    )
    text = [
        f"the GPU idles {b.host_idle_ms:.2f} ms per step outside data loading and "
        "communication: it waits for the host",
        kern,
    ]
    if e.short_kernels:
        lever = (
            "fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), "
            "torch.compile fusion, a fused optimizer (AdamW(fused=True)), a larger batch"
        )
    else:
        lever = (
            "the host code between kernels: synchronisations (.item(), .cpu(), "
            "cudaStreamSynchronize), Python overhead; profile the host (py-spy, the "
            "trace's CPU operators)"
        )
    return text, lever


_OUTSIDE = {"communication-bound": _comm, "input-bound": _input, "launch/host-bound": _host}


def _gpu_bound(b: Breakdown, e: Evidence) -> tuple[str, list[str], str]:
    mem = e.bound_pct.get("memory-bound") or 0.0
    comp = e.bound_pct.get("compute-bound") or 0.0
    known = mem + comp
    side = ""
    if e.intensity is not None and e.ridge is not None:
        side = (
            f"step intensity {e.intensity:.1f} FLOP/B, "
            f"{'below' if e.intensity < e.ridge else 'above'} the ridge point "
            f"{e.ridge:.1f} of {e.pipe}"
        )
    if known >= KNOWN_PCT:
        memory = 100.0 * mem / known >= MEMORY_PCT
        text = [
            f"{mem:.1f} % of GPU time in memory-bound kernels, {comp:.1f} % in "
            "compute-bound ones (intensity against the ridge point of their pipe)"
        ]
    elif side:
        memory = e.intensity is not None and e.ridge is not None and e.intensity < e.ridge
        text = [f"only {known:.1f} % of GPU time has a known bound: the step's intensity decides"]
    else:
        why, lever = unknown_bound(e, "a roofline for this device", "a known device or "
                                   "--peak-tflops/--bandwidth")  # fmt: skip
        return (
            "unknown",
            [f"the GPU is busy, but {why} nothing tells compute- from memory-bound kernels"],
            lever,
        )
    if side:
        text.append(side)
    if memory:
        text.append(
            f"the step moves {_f(e.bandwidth_utilisation_pct)} % of the bandwidth roof; "
            f"memory-bound kernels run at {_f(e.memory_bound_roof_pct)} % of it"
        )
        return "memory-bandwidth-bound", text, _memory_lever(e)
    text.append(f"the step reaches {_f(e.compute_utilisation_pct)} % of the {e.pipe} roof")
    return "compute-bound", text, _compute_lever(e)


def _memory_lever(e: Evidence) -> str:
    lever = (
        "fewer bytes: fuse elementwise chains and the optimizer (torch.compile, "
        "AdamW(fused=True)), fused attention (SDPA), bf16 activations"
    )
    if e.memory_bound_roof_pct is not None and e.memory_bound_roof_pct < 50.0:
        lever += "; the memory-bound kernels are far below the roof: fusing also cuts launches"
    return lever


def _compute_lever(e: Evidence) -> str:
    if e.pipe and e.pipe.startswith("simt_fp32"):
        faster = {p: v for p, v in e.tensor_peaks.items() if p in ("tensor_tf32", "tensor_bf16")}
        peaks = ", ".join(f"{p} {v / 1e12:.0f} TFLOP/s" for p, v in sorted(faster.items()))
        return (
            "the FLOPs run on the fp32 SIMT pipe: TF32 (torch.backends.cuda.matmul."
            "allow_tf32 = True) or bf16 autocast moves the GEMMs to the tensor cores"
            + (f" ({peaks})" if peaks else "")
        )
    return (
        "fewer or cheaper FLOPs: a lower precision (FP8), GEMM shapes in multiples of 128, "
        "no needless recomputation; the GEMMs' own % of roof (roofline table) shows what "
        "is left"
    )

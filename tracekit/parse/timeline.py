"""The steps of a light (CUDA-activity-only) trace, from its step markers.

``tracekit collect`` records a light timeline pass before the full one
(``collectors/passes.py``): Kineto then writes kernels, memcpy/memset and the runtime
calls that launched them, but no ``cpu_op`` and no ``ProfilerStep#N`` annotation. Each
recorded step starts by launching a marker kernel, ``torch.cuda._sleep(1)`` (kernel
:data:`MARKER_KERNEL`), and one more marker closes the last step; a run whose torch lacks
``_sleep`` writes the host times of those moments to a sidecar instead
(``<worker>.<ts>.timeline_steps.json``, format :data:`STEP_STARTS_FORMAT`).

So ``n + 1`` boundaries (the markers' launch calls, or the sidecar's times mapped onto the
trace clock) delimit ``n`` steps: step ``k`` holds every runtime call made from boundary
``k`` up to boundary ``k + 1``, and every GPU activity whose launch call it holds (by
correlation id: ``kernels.runtime_id``; an activity without a launch call in the trace was
launched before the window and belongs to no step, as the parser has it for full traces).

A **kernels-only** light trace (``collectors/cupti_pass.py``: CUPTI's kernel, memcpy and
memset records, header ``tracekitRecorder: "cupti-kernels"``) has no launch calls at all:
its boundaries are the marker kernels' own starts on the GPU, and each activity belongs
to the step its own start falls in (on the markers' stream that is launch order; an
activity of another stream that started after the next marker belongs to the next step).
The steps table then has the parser's columns (``tracekit.schema.STEPS``): the CPU span
is the span between two boundaries, the GPU span, busy time and count those of the step's
activities.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.errors import TraceError
from tracekit.parse.intervals import union_length

# torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu: at::cuda::spin_kernel); the
# profiler demangles it as "at::cuda::(anonymous namespace)::spin_kernel(long)"
MARKER_KERNEL = "spin_kernel"
_MARKER = re.compile(rf"(?:^|[^\w]){MARKER_KERNEL}(?:$|[^\w])")
STEP_STARTS_FORMAT = "tracekit.step_starts"
STEP_NAME = "timeline step {k}"


def is_marker(names: pd.Series) -> np.ndarray:
    """Whether each kernel name is the step marker's."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(names.astype(object))
    hit = np.array([bool(_MARKER.search(str(u))) for u in uniq] + [False], dtype=bool)
    return hit[codes]


def launch_ts(kernels: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """Each GPU activity's launch time: its runtime call's start, else its own (ns)."""
    ts = kernels["ts"].to_numpy(dtype=np.int64)
    rid = kernels["runtime_id"].to_numpy(dtype=np.int64) if "runtime_id" in kernels else None
    if rid is None or not len(runtime):
        return ts
    rts = runtime["ts"].to_numpy(dtype=np.int64)
    ok = (rid >= 0) & (rid < len(rts))
    return np.where(ok, rts[np.clip(rid, 0, max(len(rts) - 1, 0))], ts)


def marker_bounds(kernels: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """The launch times of the marker kernels, sorted (ns since the trace start)."""
    m = is_marker(kernels["name"])
    return np.sort(launch_ts(kernels, runtime)[m])


def read_step_starts(path: Path) -> list[int]:
    """The host times (``time.time_ns()``) of a ``timeline_steps`` sidecar."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: unreadable step-start sidecar ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != STEP_STARTS_FORMAT:
        raise TraceError(f"{path}: not a tracekit step-start sidecar ({STEP_STARTS_FORMAT})")
    starts = doc.get("starts_ns")
    if not isinstance(starts, list) or not all(isinstance(v, int) for v in starts):
        raise TraceError(f"{path}: starts_ns is not a list of integers")
    return [int(v) for v in starts]


def host_bounds(starts_ns: list[int], meta: dict[str, Any]) -> np.ndarray:
    """Host times mapped onto the trace clock: Kineto's ``ts`` is (Unix ns −
    ``baseTimeNanoseconds``) / 1000, and the tables count from ``trace_start_ns``."""
    base = meta.get("base_time_ns")
    start = meta.get("trace_start_ns")
    if not isinstance(base, int) or not isinstance(start, int):
        raise TraceError(
            "the light trace has no baseTimeNanoseconds: its clock cannot be matched to the "
            "host step-start times"
        )
    return np.sort(np.asarray(starts_ns, dtype=np.int64) - base - start)


@dataclass(frozen=True)
class LightSteps:
    """The steps of a light trace: per GPU activity and runtime call its step (-1: none),
    the steps table, whether each activity is a marker, and where the boundaries came
    from (``marker kernels`` or ``host step starts``)."""

    kernel_step: np.ndarray
    runtime_step: np.ndarray
    steps: pd.DataFrame
    marker: np.ndarray
    source: str


def _assign(bounds: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Step of each time: ``k`` for ``bounds[k] <= ts < bounds[k + 1]``, else -1."""
    k = np.searchsorted(bounds, ts, side="right") - 1
    return np.where((k >= 0) & (k < len(bounds) - 1), k, -1).astype(np.int64)


def light_steps(
    kernels: pd.DataFrame,
    runtime: pd.DataFrame,
    meta: dict[str, Any],
    starts_ns: list[int] | None = None,
) -> LightSteps:
    """The steps of a light trace's tables (``kernels``, ``runtime``: the parser's), from
    its marker kernels, else from the host step starts of its sidecar (``starts_ns``)."""
    bounds = marker_bounds(kernels, runtime)
    source = "marker kernels"
    if len(bounds) < 2 and starts_ns is not None:
        bounds, source = host_bounds(starts_ns, meta), "host step starts"
    if len(bounds) < 2:
        raise TraceError(
            f"the light trace has {len(bounds)} step marker(s) ({MARKER_KERNEL} launches) "
            "and no step-start sidecar: at least two are needed to delimit a step"
        )
    k_step = _assign(bounds, launch_ts(kernels, runtime))
    if "runtime_id" in kernels and len(runtime):  # no launch call: launched before the window
        k_step[kernels["runtime_id"].to_numpy() < 0] = -1
    r_step = _assign(bounds, runtime["ts"].to_numpy(dtype=np.int64)) if len(runtime) else None
    steps = _table(bounds, kernels, k_step)
    return LightSteps(
        kernel_step=k_step,
        runtime_step=r_step if r_step is not None else np.zeros(0, dtype=np.int64),
        steps=steps,
        marker=is_marker(kernels["name"]),
        source=source,
    )


def _table(bounds: np.ndarray, kernels: pd.DataFrame, k_step: np.ndarray) -> pd.DataFrame:
    """The steps table (``tracekit.schema.STEPS``'s columns) of ``len(bounds) - 1`` steps."""
    ts = kernels["ts"].to_numpy(dtype=np.int64)
    end = ts + kernels["dur"].to_numpy(dtype=np.int64)
    rows = []
    for k in range(len(bounds) - 1):
        sel = k_step == k
        cnt = int(sel.sum())
        rows.append(
            {
                "step": k,
                "name": STEP_NAME.format(k=k),
                "cpu_ts": int(bounds[k]),
                "cpu_dur": int(bounds[k + 1] - bounds[k]),
                "gpu_ts": int(ts[sel].min()) if cnt else None,
                "gpu_dur": int(end[sel].max() - ts[sel].min()) if cnt else None,
                "gpu_busy": union_length(ts[sel], end[sel]) if cnt else 0,
                "kernel_count": cnt,
            }
        )
    frame: pd.DataFrame = pd.DataFrame(rows)
    frame["step"] = frame["step"].astype(np.int32)
    for c in ("gpu_ts", "gpu_dur"):
        frame[c] = frame[c].astype("Int64")
    return frame


def with_light_steps(trace: Any, sidecar: Path | None = None) -> Any:
    """A parsed light trace (``tracekit.parse.Trace``) with its steps: ``kernels.step`` and
    ``runtime.step`` set, the steps table replaced, a boolean ``kernels.marker`` column and
    ``meta['timeline']`` (``source``, ``steps``)."""
    starts = read_step_starts(sidecar) if sidecar is not None else None
    ls = light_steps(trace.kernels, trace.runtime, trace.meta, starts)
    kernels = trace.kernels.assign(step=ls.kernel_step.astype(np.int32), marker=ls.marker)
    runtime = trace.runtime
    if len(runtime):
        runtime = runtime.assign(step=ls.runtime_step.astype(np.int32))
    meta = {**trace.meta, "timeline": {"source": ls.source, "steps": len(ls.steps)}}
    return replace(trace, kernels=kernels, runtime=runtime, steps=ls.steps, meta=meta, tables=None)

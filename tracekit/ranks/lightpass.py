"""One rank's light timeline pass, joined to its full (profiled) pass.

``tracekit collect --gpus N`` records every rank twice: a light pass (CUPTI kernels only,
or Kineto CUDA only) whose step is close to the unprofiled one, then the full pass, whose
host side the profiler stretches, by a different amount on each rank. A rank's GPU busy,
compute, communication, exposed communication and idle (and its lanes) are therefore taken
from its light pass where that pass can stand for the full one, exactly as the single-rank
report does (:mod:`tracekit.summary.timeline`: the light kernels joined to the full pass's
per stream by order and name; refused below
:data:`~tracekit.summary.timeline.MIN_JOINED_PCT` % of GPU time joined). Each light
activity carries its full partner's class. Everything else (collectives, sync wait, CPU
figures, classes, the merged trace) stays on the full pass.

The rank's light trace is the one its run folder's manifest names
(``distributed.ranks[R].artifacts.timeline_trace``, the entry whose ``trace`` is this
rank's trace). A bare folder of rank traces has none: the figures come from the full pass.

Times: the light pass is another profiler session on another clock, so its steps are laid
on the full pass's time base by one shift per rank: its first paired step starts where the
full pass's first step starts (the light steps then follow one another as recorded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

import tracekit.summary.steps as S
import tracekit.summary.timeline as TL
from tracekit.manifest import manifest_or_empty
from tracekit.ranks.collectives import COMMUNICATION

BOUND_COLUMNS = ["step", "start_ns", "step_time_ns", "cpu_ns"]


@dataclass(frozen=True)
class Activities:
    """The GPU activities the step figures are measured on (ns, the full trace's base)."""

    ts: np.ndarray
    dur: np.ndarray
    step: np.ndarray
    comm: np.ndarray  # bool: a communication activity


def step_bounds(steps: pd.DataFrame) -> pd.DataFrame:
    """Per analysed step (parser steps table): ``start_ns`` (the earlier of its CPU and GPU
    starts), ``step_time_ns`` (the report's ``max(cpu span, gpu span)``), ``cpu_ns``."""
    s = steps[steps["step"] >= 0].sort_values("step")
    cpu_ts = s["cpu_ts"].to_numpy(dtype=np.int64)
    gpu_ts = s["gpu_ts"].astype("float64").to_numpy()
    cpu_dur = s["cpu_dur"].to_numpy(dtype=np.int64)
    gpu_dur = s["gpu_dur"].astype("float64").fillna(0.0).to_numpy()
    start = np.where(np.isnan(gpu_ts), cpu_ts, np.minimum(cpu_ts, np.nan_to_num(gpu_ts)))
    out = cast(
        pd.DataFrame,
        pd.DataFrame(
            {
                "step": s["step"].to_numpy(dtype=np.int64),
                "start_ns": start.astype(np.int64),
                "step_time_ns": np.maximum(cpu_dur, gpu_dur).astype(np.int64),
                "cpu_ns": cpu_dur,
            },
            columns=BOUND_COLUMNS,
        ),
    )
    return out


def full_activities(trace: Any, classes: np.ndarray) -> Activities:
    """The full pass's GPU activities with the classify stage's classes."""
    k = trace.kernels
    return Activities(
        ts=k["ts"].to_numpy(dtype=np.int64),
        dur=k["dur"].to_numpy(dtype=np.int64),
        step=k["step"].to_numpy(dtype=np.int64),
        comm=np.asarray(classes == COMMUNICATION, dtype=bool),
    )


def _entry(manifest: dict[str, Any], trace: Path) -> dict[str, Any] | None:
    """The manifest's rank entry whose trace is ``trace``."""
    dist = manifest_or_empty(manifest).distributed
    for e in dist.ranks if dist is not None else []:
        arts = e.get("artifacts")
        if not isinstance(arts, dict):
            continue
        if arts.get("trace") == trace.name or trace.name in (arts.get("traces") or []):
            return e
    return None


def rank_timeline(trace: Any, path: Path) -> TL.Timeline:
    """The rank's light pass joined to ``trace`` (its full pass, read from ``path``), or
    the full pass with the reason (:func:`tracekit.summary.timeline.for_report`)."""
    steps = S.analysed_steps(trace.steps)
    mpath = Path(path).parent / "manifest.json"
    if not mpath.is_file():  # a bare folder of rank traces
        return TL.for_report(trace, steps)
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as e:
        why = f"{mpath}: unreadable manifest ({e})"
        return TL.Timeline(TL.FULL, "auto", reason=why, brief="no light pass")
    entry = _entry(manifest, Path(path)) if isinstance(manifest, dict) else None
    if entry is None:
        why = f"no light timeline pass (the run's manifest lists no rank with {Path(path).name})"
        return TL.Timeline(TL.FULL, "auto", reason=why, brief="no light pass")
    trace.manifest = {**manifest, "artifacts": entry["artifacts"]}
    trace.run_dir = Path(path).parent
    return TL.for_report(trace, steps)


def light_figures(
    tl: TL.Timeline, trace: Any, classes: np.ndarray, full: pd.DataFrame
) -> tuple[Activities, pd.DataFrame]:
    """The light pass's activities (step markers left out; each with its full partner's
    class) and step bounds, shifted onto the full pass's time base (see the module)."""
    classified = pd.DataFrame({"kernel_id": trace.kernels["kernel_id"], "class": classes})
    k = tl.kernels
    k = k[~k["marker"].to_numpy(dtype=bool)] if "marker" in k else k
    k = TL.with_classes(k, classified)
    bounds = step_bounds(tl.steps)
    bounds = bounds[bounds["step"].isin(full["step"])].reset_index(drop=True)
    shift = 0
    if len(bounds):
        first = int(bounds["step"].iloc[0])
        shift = int(full.loc[full["step"] == first, "start_ns"].iloc[0]) - int(
            bounds["start_ns"].iloc[0]
        )
    bounds["start_ns"] += shift
    bounds["cpu_ns"] = bounds["step"].map(full.set_index("step")["cpu_ns"]).astype(np.int64)
    acts = Activities(
        ts=k["ts"].to_numpy(dtype=np.int64) + shift,
        dur=k["dur"].to_numpy(dtype=np.int64),
        step=k["step"].to_numpy(dtype=np.int64),
        comm=(k["class"].astype(object) == COMMUNICATION).to_numpy(dtype=bool),
    )
    return acts, bounds


def source_info(tl: TL.Timeline) -> dict[str, Any]:
    """What ``perrank.json`` says about the pass its timeline figures come from."""
    return {
        "timeline_source": tl.source,
        "timeline_reason": tl.reason,
        "timeline_recorder": tl.recorder if tl.light else None,
        "timeline_joined_pct": tl.joined_pct,
        "timeline_trace": tl.path,
        "timeline_notes": list(tl.notes),
    }

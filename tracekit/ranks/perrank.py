"""The per-rank work: ONE rank's trace in, small results on disk out.

:func:`analyse` is a pure function of one trace file (no other rank is read), so the ranks
of a job can be analysed in any order, in separate processes or on a cluster
(:func:`tracekit.ranks.engine.map_ranks`), and the cross-rank step
(:mod:`tracekit.ranks.reduce`) reads only what it wrote:

* ``perrank.json`` — who the rank is (``distributedInfo``, host, device), its time base
  (``trace_start_ns``: add it to the tables' times), memory peak, counts;
* ``steps.arrow`` — per analysed step (:data:`STEP_COLUMNS`): step time, GPU busy,
  compute, communication (kernel union and summed), exposed communication, idle; from the
  rank's light timeline pass where its run folder has one that joins the full pass
  (:mod:`tracekit.ranks.lightpass`), else from the full pass (``perrank.json``
  ``timeline_source``, ``timeline_reason``);
* ``classes.arrow`` — per class: summed kernel time and the union of its intervals;
* ``collectives.arrow`` — its collectives (:data:`tracekit.ranks.collectives.INSTANCE_COLUMNS`);
* ``lanes.arrow`` — its timeline coarsened for the ranks x time chart: compute,
  exposed and overlapped communication spans (from the same pass as ``steps.parquet``);
* ``timeline.parquet`` — the events of its merged-trace process (:data:`TIMELINE_COLUMNS`):
  every GPU activity, and the CPU operators at depth 0-1, annotations and collective
  operators (the merged multi-rank trace, :mod:`tracekit.ranks.merged`).

Definitions (per step, over the GPU activities launched in it; every figure is a length of
a union of intervals, never a sum over streams): **busy** = all GPU activity; **compute** =
every activity that is not communication (kernels, copies, memsets); **communication** =
the communication kernels; **exposed communication** = communication not overlapped by
compute; **idle** = step time − busy; **input** = the host's input spans (DataLoader
``__next__``, operators that copy host to device: :func:`tracekit.summary.verdict.input_spans`)
with no GPU activity beside them (of the full pass). The step time is the report's
(``max(cpu span, gpu span)``, :func:`tracekit.summary.steps.step_table`) of the pass the
figures come from; ``full_step_time_ns`` is the full pass's (its collectives' sync wait is
set against it). Classes, collectives, the CPU figures and the merged-trace events are
always the full pass's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

import tracekit.summary.intervals as I
import tracekit.summary.memory as M
from tracekit.io import atomic_write_json
from tracekit.ranks import lightpass as LP
from tracekit.ranks import spans as SP
from tracekit.ranks.collectives import rank_collectives

VERSION = "4"  # of what analyse() writes (part of the engine's cache key)
RESULT = "perrank.json"
LANE_POINTS = 4000  # lanes are coarsened to ~this many pixels across the analysed steps
CLASS_COLUMNS = ["class", "kernel_ns", "union_ns", "count", "busy_ns"]
STEP_COLUMNS = [
    "step", "start_ns", "end_ns", "step_time_ns", "full_step_time_ns", "cpu_ns", "busy_ns",
    "compute_ns",
    "comm_ns", "comm_sum_ns", "exposed_comm_ns", "idle_ns", "kernels", "comm_kernels",
    "input_ns",
]  # fmt: skip


def kernel_classes(trace: Any) -> np.ndarray:
    """The class of every GPU activity (the classify stage's rules)."""
    from tracekit.classify.classes import classify_kernels

    if not len(trace.kernels):
        return np.zeros(0, dtype=object)
    return np.asarray(classify_kernels(trace.kernels, trace.ops)["class"].to_numpy(), dtype=object)


def _spans(ts: np.ndarray, dur: np.ndarray, sel: np.ndarray) -> I.Spans:
    return I.merge(ts[sel], ts[sel] + dur[sel])


def step_figures(bounds: pd.DataFrame, acts: LP.Activities, full: pd.DataFrame) -> pd.DataFrame:
    """Per step of ``bounds`` (:func:`tracekit.ranks.lightpass.step_bounds`, the pass the
    figures come from): :data:`STEP_COLUMNS`, measured on ``acts``; ``full_step_time_ns``
    from ``full`` (the full pass's bounds: the collectives' own work is set against it)."""
    ts, dur, step, comm = acts.ts, acts.dur, acts.step, acts.comm
    f_step, f_time = (full[c].astype(int).tolist() for c in ("step", "step_time_ns"))
    full_time = dict(zip(f_step, f_time, strict=True))
    cols = [bounds[c].to_numpy(dtype=np.int64).tolist() for c in LP.BOUND_COLUMNS]
    rows = []
    for s, start, time, cpu in zip(*cols, strict=True):
        m = step == s
        busy = _spans(ts, dur, m)
        compute = _spans(ts, dur, m & ~comm)
        comms = _spans(ts, dur, m & comm)
        rows.append(
            {
                "step": s,
                "start_ns": start,
                "end_ns": start + time,
                "step_time_ns": time,
                "full_step_time_ns": full_time.get(s, time),
                "cpu_ns": cpu,
                "busy_ns": I.length(busy),
                "compute_ns": I.length(compute),
                "comm_ns": I.length(comms),
                "comm_sum_ns": int(dur[m & comm].sum()),
                "exposed_comm_ns": I.uncovered(comms, compute),
                "idle_ns": max(0, time - I.length(busy)),
                "kernels": int(m.sum()),
                "comm_kernels": int((m & comm).sum()),
                "input_ns": 0,
            }
        )
    return cast(pd.DataFrame, pd.DataFrame(rows, columns=STEP_COLUMNS))


def input_wait(trace: Any) -> dict[int, int]:
    """Per step: input time with no GPU activity
    (:func:`tracekit.summary.verdict.input_wait_ns`)."""
    from tracekit.summary.verdict import input_spans, input_wait_ns

    if not len(trace.ops):
        return {}
    return input_wait_ns(input_spans(trace.ops, trace.kernels), trace.kernels)


def class_figures(trace: Any, classes: np.ndarray, steps: list[int]) -> pd.DataFrame:
    """Per class over the analysed steps: ``class``, ``kernel_ns`` (summed durations),
    ``union_ns`` (union of its intervals), ``count``; plus ``busy_ns`` (union of all)."""
    k = trace.kernels
    m = k["step"].isin(steps).to_numpy()
    ts = k["ts"].to_numpy(dtype=np.int64)
    dur = k["dur"].to_numpy(dtype=np.int64)
    busy = I.length(_spans(ts, dur, m))
    rows = []
    for c in sorted({str(x) for x in classes[m]}):
        sel = m & (classes == c)
        rows.append(
            {
                "class": c,
                "kernel_ns": int(dur[sel].sum()),
                "union_ns": I.length(_spans(ts, dur, sel)),
                "count": int(sel.sum()),
                "busy_ns": busy,
            }
        )
    return cast(pd.DataFrame, pd.DataFrame(rows, columns=CLASS_COLUMNS))


def lanes(acts: LP.Activities, steps: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    """The rank's timeline over the analysed steps (measured on ``acts``, the pass its
    step figures come from), coarsened for drawing: ``what`` (compute, comm_exposed,
    comm_overlapped), ``start_ns``, ``end_ns`` (relative)."""
    cols = ["what", "start_ns", "end_ns"]
    if not len(steps):
        return cast(pd.DataFrame, pd.DataFrame(columns=cols))
    lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    gap = max(1, (hi - lo) // LANE_POINTS)
    ts, dur = acts.ts, acts.dur
    m = np.isin(acts.step, steps["step"].to_numpy(dtype=np.int64))
    compute = _spans(ts, dur, m & ~acts.comm)
    if len(ts):
        comms = _spans(ts, dur, m & acts.comm)
    else:  # a CPU trace: its collectives' spans
        c = coll[coll["step"].isin(steps["step"].tolist())]
        comms = I.merge(c["ts"].to_numpy(dtype=np.int64), c["end"].to_numpy(dtype=np.int64))
    parts = {
        "compute": compute,
        "comm_exposed": SP.difference(comms, compute),
        "comm_overlapped": SP.intersect(comms, compute),
    }
    frames = []
    for what, sp in parts.items():
        s, e = SP.coarsen(sp, gap)
        frames.append(pd.DataFrame({"what": what, "start_ns": s, "end_ns": e}))
    return cast(pd.DataFrame, pd.concat(frames, ignore_index=True)[cols])


TIMELINE_COLUMNS = ["tid", "track", "name", "cat", "ts", "dur", "cls"]
GPU_TID = 1_000_000_000  # tid of GPU stream s in the merged trace: GPU_TID + s
TIMELINE_OPS = ("nccl:", "gloo:", "c10d::", "record_param_comms", "ProfilerStep#")


def timeline(trace: Any, classes: np.ndarray) -> pd.DataFrame:
    """The rank's events for the merged trace (times relative to its trace, ns)."""
    k = trace.kernels
    gpu = pd.DataFrame(
        {
            "tid": GPU_TID + k["stream"].to_numpy(dtype=np.int64),
            "track": [f"GPU {d} stream {s}" for d, s in zip(k["device"], k["stream"], strict=True)],
            "name": k["name"].astype(str).to_numpy(),
            "cat": k["kind"].astype(str).to_numpy(),
            "ts": k["ts"].to_numpy(dtype=np.int64),
            "dur": k["dur"].to_numpy(dtype=np.int64),
            "cls": classes.astype(str) if len(classes) else np.zeros(0, dtype=str),
        }
    )
    o = trace.ops
    names = o["name"].astype(str)
    keep = (o["depth"].to_numpy() <= 1) | names.str.startswith(TIMELINE_OPS).to_numpy()
    keep |= (o["category"].astype(str) == "user_annotation").to_numpy()
    o = o[keep]
    cpu = pd.DataFrame(
        {
            "tid": o["tid"].to_numpy(dtype=np.int64),
            "track": [f"CPU thread {t}" for t in o["tid"]],
            "name": o["name"].astype(str).to_numpy(),
            "cat": o["category"].astype(str).to_numpy(),
            "ts": o["ts"].to_numpy(dtype=np.int64),
            "dur": o["dur"].to_numpy(dtype=np.int64),
            "cls": "",
        }
    )
    return cast(pd.DataFrame, pd.concat([cpu, gpu], ignore_index=True)[TIMELINE_COLUMNS])


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def rank_info(trace: Any, steps: pd.DataFrame, coll: pd.DataFrame) -> dict[str, Any]:
    """``perrank.json``: who the rank is and its scalar figures."""
    meta = trace.meta
    info = meta.get("distributed_info") if isinstance(meta.get("distributed_info"), dict) else {}
    mem = M.memory_stats(trace.memory) if len(trace.memory) else None
    on_gpu = bool(len(trace.kernels))
    n = max(1, len(steps))
    return {
        "version": VERSION,
        "trace": str(trace.path),
        "rank": info.get("rank"),
        "world_size": info.get("world_size"),
        "backend": info.get("backend"),
        "distributed_info": info or None,
        "device": trace.device_name,
        "device_properties": meta.get("device_properties") or [],
        "on": "gpu" if on_gpu else "cpu",
        "trace_start_ns": int(meta.get("trace_start_ns") or 0),
        "steps": [int(s) for s in steps["step"]],
        "kernels": len(trace.kernels),
        "collectives": len(coll),
        "collectives_per_step": len(coll[coll["step"].isin(steps["step"].tolist())]) / n,
        "memory_device": mem.device if mem else None,
        "peak_allocated_bytes": mem.peak_allocated_bytes if mem and on_gpu else None,
        "peak_reserved_bytes": mem.peak_reserved_bytes if mem and on_gpu else None,
        "step_time_ms": _num(float(steps["step_time_ns"].median()) / 1e6) if len(steps) else None,
    }


def _parquet(df: pd.DataFrame, path: Path) -> None:
    df.reset_index(drop=True).to_parquet(path, index=False, compression="snappy")


def _arrow(df: pd.DataFrame, path: Path) -> None:
    """An Arrow IPC file (uncompressed): the reduce reads one in 0.04 ms where a Parquet file
    of these few rows costs 0.26 ms to open and decode — the reduce's main cost per rank."""
    import pyarrow as pa

    table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)


def analyse(trace: Path, out: Path) -> dict[str, Any]:
    """Analyse ONE rank's trace into ``out`` (see the module) and return its small
    figures (what ``perrank.json`` holds less the device properties)."""
    from tracekit.parse import load

    t = load(trace)
    classes = kernel_classes(t)
    coll = rank_collectives(t, classes)
    full = LP.step_bounds(t.steps)
    tl = LP.rank_timeline(t, Path(trace))
    if tl.light:
        acts, bounds = LP.light_figures(tl, t, classes, full)
    else:
        acts, bounds = LP.full_activities(t, classes), full
    steps = step_figures(bounds, acts, full)
    steps["input_ns"] = steps["step"].map(input_wait(t)).fillna(0).astype(np.int64)
    info = {**rank_info(t, steps, coll), **LP.source_info(tl)}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _arrow(steps, out / "steps.arrow")
    _arrow(class_figures(t, classes, info["steps"]), out / "classes.arrow")
    _arrow(coll, out / "collectives.arrow")
    _arrow(lanes(acts, steps, coll), out / "lanes.arrow")
    _parquet(timeline(t, classes), out / "timeline.parquet")
    atomic_write_json(out / RESULT, info)
    return {k: v for k, v in info.items() if k not in ("device_properties", "distributed_info")}

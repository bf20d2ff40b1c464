"""TensorBoard output through tensorboard's own event writer (no torch, no TensorFlow).

One event file per report, ``<logdir>/<run>/events.out.tfevents.<time>.<host>.<pid>.tracekit``:

* scalars, x = profiler step number: ``time_share_pct/<class>``, ``gpu_ms/<class>``,
  ``step_time_ms``, ``gpu_idle_pct``, ``tokens_per_s`` (batch × seq known) — on a CPU run
  ``cpu_ms/<class>`` and ``framework_overhead_pct`` for ``gpu_ms`` and ``gpu_idle_pct``,
  ``memory/peak_allocated_bytes`` and ``memory/peak_reserved_bytes`` (per step);
  ``measured/*`` (the run manifest's unprofiled figures) at the first step;
* ``memory_timeline/allocated_bytes`` and ``memory_timeline/reserved_bytes``: the allocator
  totals over time, x = microseconds since the trace start (at most
  :data:`TIMELINE_POINTS` points, bucket maxima);
* a generate run: ``generate/<figure>`` per decode step and the run's figures at the
  first step (:func:`_generate`);
* images ``plots/<name>`` (the PNGs) and text ``report/<table>`` (Markdown tables).

The file is written beside the run folder under a temporary name and renamed into it;
event files of an earlier tracekit report of the same run (suffix ``.tracekit``) are
removed first, so re-running a report does not plot every point twice.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.compat.proto import types_pb2 as types
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter

import tracekit.summary.generate as GEN
from tracekit.summary import Summary
from tracekit.summary import memory as M

SUFFIX = ".tracekit"
TIMELINE_POINTS = 1000  # TensorBoard keeps 1000 scalar points per tag by default


class _Writer:
    def __init__(self, logdir: Path) -> None:
        self._w = EventFileWriter(
            str(logdir), max_queue_size=1000, flush_secs=3600, filename_suffix=SUFFIX
        )
        self._t = 0.0

    def _add(self, value: summary_pb2.Summary.Value, step: int, wall: float) -> None:
        ev = event_pb2.Event(
            wall_time=wall, step=int(step), summary=summary_pb2.Summary(value=[value])
        )
        self._w.add_event(ev)

    def scalar(self, tag: str, value: float, step: int, wall: float) -> None:
        if value is None or not math.isfinite(float(value)):
            return
        self._add(summary_pb2.Summary.Value(tag=tag, simple_value=float(value)), step, wall)

    def image(self, tag: str, png: bytes, step: int, wall: float) -> None:
        w, h = _png_size(png)
        img = summary_pb2.Summary.Image(height=h, width=w, colorspace=4, encoded_image_string=png)
        self._add(summary_pb2.Summary.Value(tag=tag, image=img), step, wall)

    def text(self, tag: str, markdown: str, step: int, wall: float) -> None:
        tensor = tensor_pb2.TensorProto(
            dtype=types.DT_STRING,
            string_val=[markdown.encode("utf-8")],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        )
        meta = text_metadata.create_summary_metadata(display_name=tag, description="")
        self._add(summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor), step, wall)

    def close(self) -> str:
        self._w.close()
        return str(self._w.get_logdir())


def _png_size(png: bytes) -> tuple[int, int]:
    # PNG: 8-byte signature, IHDR chunk: length, type, width (4 bytes BE), height.
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def write_events(
    sm: Summary,
    plots: Mapping[str, bytes],
    tables: Mapping[str, str],
    run_dir: Path,
    wall_time: float,
) -> Path:
    """Write the report's scalars, images and text into ``run_dir``; return the file."""

    def fill(w: _Writer) -> None:
        steps = sm.steps
        first = steps[0] if steps else 0
        t = wall_time
        per = sm.class_per_step
        # a CPU run's time is its work operators', its idle share the framework overhead
        ms_tag, idle_tag = (
            ("cpu_ms", "framework_overhead_pct") if sm.cpu else ("gpu_ms", "gpu_idle_pct")
        )
        for step, row in zip(per.index.tolist(), per.to_dict("records"), strict=True):
            total = float(sum(row.values()))
            for cls, ns in row.items():
                w.scalar(f"{ms_tag}/{cls}", float(ns) / 1e6, int(step), t)
                if total > 0:
                    w.scalar(f"time_share_pct/{cls}", 100.0 * float(ns) / total, int(step), t)
        tokens = sm.header.tokens_per_step
        for r in sm.step_table.to_dict("records"):
            step, ms = int(r["step"]), float(r["step_time_ms"])
            w.scalar("step_time_ms", ms, step, t)
            w.scalar(idle_tag, float(r["gpu_idle_pct"]), step, t)
            if tokens and ms > 0:
                w.scalar("tokens_per_s", tokens / (ms / 1e3), step, t)
        _step_summary(w, sm, t)
        _generate(w, sm, t)
        for r in sm.memory_per_step.to_dict("records"):
            w.scalar("memory/peak_allocated_bytes", float(r["peak_allocated"]), int(r["step"]), t)
            w.scalar("memory/peak_reserved_bytes", float(r["peak_reserved"]), int(r["step"]), t)
        h = sm.header
        if h.measured_step_time_ms is not None:
            w.scalar("measured/step_time_ms", h.measured_step_time_ms, first, t)
        if h.measured_tokens_per_s is not None:
            w.scalar("measured/tokens_per_s", h.measured_tokens_per_s, first, t)
        if sm.memory is not None and sm.memory.events == 0:  # manifest figures only
            w.scalar("measured/peak_allocated_bytes", sm.memory.peak_allocated_bytes, first, t)
            w.scalar("measured/peak_reserved_bytes", sm.memory.peak_reserved_bytes, first, t)
        _categories(w, sm, t)
        tl = M.thin(sm.memory_timeline, TIMELINE_POINTS)
        for ts, a, r in zip(tl["ts"], tl["allocated"], tl["reserved"], strict=True):
            us = int(ts) // 1000
            w.scalar("memory_timeline/allocated_bytes", a, us, t)
            w.scalar("memory_timeline/reserved_bytes", r, us, t)
        for name, png in plots.items():
            w.image(f"plots/{name}", png, first, t)
        for name, md in tables.items():
            w.text(f"report/{name}", md, first, t)

    return write_event_file(run_dir, fill)


STEP_SCALARS = (
    "bandwidth_used",
    "bandwidth_utilisation_pct",
    "flops_per_s",
    "compute_utilisation_pct",
    "arithmetic_intensity",
)


def _step_summary(w: _Writer, sm: Summary, t: float) -> None:
    """``step_summary/<figure>`` per step (profiled step time) and, at the first step, the
    overall figures over the step summary's basis (``step_summary/<basis>/<figure>``);
    memory model, dynamic memory and the timeline passes' distance from the unprofiled
    step at the first step."""
    for r in sm.step_summary.per_step.to_dict("records"):
        for key in STEP_SCALARS:
            w.scalar(f"step_summary/{key}", r[key], int(r["step"]), t)
    first = sm.steps[0] if sm.steps else 0
    doc = sm.summary.get("step_summary", {})
    for key in STEP_SCALARS:
        v = doc.get(key)
        if v is not None:
            w.scalar(f"step_summary/{sm.step_summary.basis}/{key}", v, first, t)
    mf = sm.memory_facts
    for key, v in (
        ("memory/dynamic_peak_bytes", mf.dynamic_peak_bytes),
        ("memory/activation_bytes_per_token", mf.activation_bytes_per_token),
        ("memory/model_peak_bytes", mf.model.peak if mf.model is not None else None),
        *_timeline_scalars(sm),
    ):
        if v is not None:
            w.scalar(key, v, first, t)


def _timeline_scalars(sm: Summary) -> list[tuple[str, float | None]]:
    """Each pass's trace step against the unprofiled one (``summary.json`` ``timeline``)."""
    tf = sm.timeline_facts
    if tf is None:
        return []
    return [
        ("step_summary/timeline/light_vs_unprofiled_pct", tf.light_vs_unprofiled_pct),
        ("step_summary/timeline/full_vs_unprofiled_pct", tf.full_vs_unprofiled_pct),
    ]


# a generate run's per-step figures (tracekit.summary.generate.PER_STEP_COLUMNS) but the
# ones that repeat another in other units
GENERATE_STEP_SCALARS = tuple(
    c
    for c in GEN.PER_STEP_COLUMNS
    if c
    not in ("step", "trace_step_ms", "kernel_bw", "measured_bw", "model_busy_bw", "model_flops")
)


def _generate(w: _Writer, sm: Summary, t: float) -> None:
    """A generate run: ``generate/<figure>`` per decode step (x = the step), and at the
    first step the run's figures (``generate/ttft_ms``, ``generate/prefill_pct``, the
    decode model's bytes and FLOPs per token, the ridge batches)."""
    g = sm.generate
    if g is None:
        return
    for r in g.per_step.to_dict("records"):
        for key in GENERATE_STEP_SCALARS:
            w.scalar(f"generate/{key}", r[key], int(r["step"]), t)
    doc = sm.summary.get("generate") or {}
    first = g.steps[0]
    for key, v in (
        ("ttft_ms", g.shares.get("ttft_ms")),
        ("prefill_pct", g.shares.get("prefill_pct")),
        ("prefill_gpu_pct", g.shares.get("prefill_gpu_pct")),
        ("model_bytes_per_token", (doc.get("model") or {}).get("bytes_per_token")),
        ("model_flops_per_token", (doc.get("model") or {}).get("flops_per_token")),
        ("gemm_ridge_batch", (doc.get("model") or {}).get("gemm_ridge_batch")),
        ("step_ridge_batch", (doc.get("model") or {}).get("step_ridge_batch")),
        ("gemm_intensity", g.gemm.get("intensity")),
    ):
        if v is not None:
            w.scalar(f"generate/{key}", float(v), first, t)


def _categories(w: _Writer, sm: Summary, t: float) -> None:
    """``memory_category/<category>`` over time (x = µs since the trace start when the
    export is aligned with the trace, else since its own start), at most
    :data:`TIMELINE_POINTS` points."""
    cat = sm.categories
    if cat is None:
        return
    tl = M.downsample_categories(cat.timeline, TIMELINE_POINTS)
    if not len(tl.times_us):
        return
    # in µs: the export's epoch microseconds (~1.7e15) times 1e3 would lose the ns in float64
    t0 = cat.offset_ns / 1e3 if cat.offset_ns is not None else -float(tl.times_us[0])
    x = np.rint(tl.times_us + t0).astype(np.int64)
    for j, name in enumerate(tl.categories):
        for us, v in zip(x, tl.bytes[:, j], strict=True):
            w.scalar(f"memory_category/{name}", float(v), int(us), t)


def write_event_file(run_dir: Path, fill: Callable[[_Writer], None]) -> Path:
    """One event file in ``run_dir`` with what ``fill`` writes, renamed into place; earlier
    tracekit event files there are removed first. Returns the file."""
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.", suffix=".tmp", dir=run_dir.parent))
    try:
        w = _Writer(tmp)
        fill(w)
        w.close()
        written = [p for p in tmp.iterdir() if p.name.startswith("events.out.tfevents.")]
        if len(written) != 1:
            raise RuntimeError(f"expected one event file in {tmp}, found {len(written)}")
        run_dir.mkdir(parents=True, exist_ok=True)
        for old in run_dir.glob(f"events.out.tfevents.*{SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
        final = run_dir / written[0].name
        os.replace(written[0], final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

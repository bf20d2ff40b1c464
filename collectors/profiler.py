"""A thin, typed wrapper around ``torch.profiler.profile`` (after torchtitan's).

``Profiler(config, out_dir, device=...)`` is a context manager with ``step()``; it
adds nothing to the profiled steps themselves (the benchmark
``benchmarks/profiler_overhead.py`` checks that), and at the end of each active
window it writes:

* the Kineto trace, gzipped, as ``<out_dir>/<worker>.<ts>.pt.trace.json.gz`` (the
  layout TensorBoard's PyTorch profiler plugin and Perfetto open; ``<ts>`` is
  ``time.time_ns()``), through a temporary name and a rename, so an interrupted
  export never leaves a half-written trace;
* where PyTorch supports it, the per-category memory timeline as
  ``<worker>.<ts>.memory_timeline.json.gz`` (format: :func:`write_memory_timeline`).

:func:`record_memory_snapshot` captures a CUDA caching-allocator snapshot (a pickle
that https://pytorch.org/memory_viz opens). **Snapshots are pickles: load them only
from sources you trust** (unpickling can run arbitrary code).
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from tracekit.collectors.observer import settle
from tracekit.collectors.profiler_config import ProfilerConfig as ProfilerConfig
from tracekit.io import atomic_file, gzip_bytes, gzip_file

MEMORY_TIMELINE_FORMAT = "tracekit.memory_timeline"


class TorchProfile(torch.profiler.profile):
    """``torch.profiler.profile`` that does not import Inductor to read one of its flags.

    Each ``prepare_trace`` (the profiler's start, and every schedule transition to warm-up)
    asks ``hasattr(torch, "_inductor")`` to read ``inductor.config.triton.cudagraphs``;
    torch's lazy module attributes turn that question into ``import torch._inductor``,
    which imports ``torch._dynamo``: about 3 s of CPU on a 2-core host (torch 2.13,
    ``python -X importtime``). Where Inductor is not loaded, nothing can have been
    compiled with its CUDA graphs, so the answer that flag gives is irrelevant: the
    attribute then reads as absent for the duration of the call. Where it is loaded (the
    compile lever, a script that compiled), torch's own path runs unchanged.

    What it saves: processes that profile without an optimizer (generate collects,
    inference scripts under ``tracekit run``): a tiny generate collect on CPU took 3.9
    instead of 6.7 CPU-s. A training process imports Dynamo anyway, at its first
    optimizer (``torch.optim.Optimizer.__init__`` is wrapped in ``torch._disable_dynamo``,
    which imports it on the first call).
    """

    def prepare_trace(self) -> None:
        lazy = torch.__dict__.get("__getattr__")
        if "torch._inductor" in sys.modules or lazy is None:
            super().prepare_trace()
            return

        def no_lazy_inductor(name: str) -> Any:
            if name == "_inductor":
                raise AttributeError(f"module 'torch' has no attribute {name!r}")
            return lazy(name)

        setattr(torch, "__getattr__", no_lazy_inductor)  # noqa: B010 (a module's hook)
        try:
            super().prepare_trace()
        finally:
            setattr(torch, "__getattr__", lazy)  # noqa: B010


def activities(device: torch.device) -> list[torch.profiler.ProfilerActivity]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def default_worker_name() -> str:
    """``<hostname>_<pid>``, as torch's tensorboard_trace_handler names workers."""
    return f"{socket.gethostname()}_{os.getpid()}"


def write_trace(prof: torch.profiler.profile, path: Path) -> Path:
    """Export ``prof``'s Chrome trace to ``path`` (gzipped when it ends in .gz), atomically.

    Kineto writes the JSON; tracekit gzips it (:func:`tracekit.io.gzip_file`) rather than
    asking torch to, whose ``.gz`` export compresses line by line at level 9."""
    path = Path(path)
    if path.suffix != ".gz":
        with atomic_file(path, ".tmp.json") as t:
            prof.export_chrome_trace(str(t))
        return path
    with atomic_file(path, ".tmp.json.gz") as t:
        plain = t.with_suffix("")  # .<name>.<random>.tmp.json, beside it
        try:
            prof.export_chrome_trace(str(plain))
            gzip_file(plain, t)
        finally:
            plain.unlink(missing_ok=True)
    return path


PROFILER_FLOPS_FORMAT = "tracekit.profiler_flops"


def profiler_flops_rows(prof: torch.profiler.profile) -> list[dict[str, Any]]:
    """torch's FLOP estimates summed per (operator, input shapes), in order of first call.

    The rows ``prof.key_averages(group_by_input_shape=True)`` gives for the operators with
    FLOPs (tests/test_collect.py compares the two), read from Kineto's events directly:
    key_averages first builds a ``FunctionEvent`` tree of every event, whose links are
    reference cycles: 25-40x slower (benchmarks/collect_postprocess.py, CPU and H200)."""
    from torch.autograd.profiler import _filter_name

    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:  # not a Kineto profile: torch's own averages
        return key_averages_rows(prof)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for ev in results.events():
        flops = ev.flops()
        if not flops or _filter_name(ev.name()):
            continue
        # key_averages' grouping key (name, device, user annotation, shapes as text)
        key = (ev.name(), int(ev.device_type()), ev.is_user_annotation(), str(ev.shapes()))
        row = rows.get(key)
        if row is None:
            rows[key] = {"name": ev.name(), "input_shapes": ev.shapes(), "count": 1,
                         "flops": int(flops)}  # fmt: skip
        else:
            row["count"] += 1
            row["flops"] += int(flops)
    return list(rows.values())


def key_averages_rows(prof: torch.profiler.profile) -> list[dict[str, Any]]:
    """The same rows from ``prof.key_averages(group_by_input_shape=True)`` (torch's way)."""
    return [
        {"name": e.key, "input_shapes": e.input_shapes, "count": int(e.count),
         "flops": int(e.flops)}
        for e in prof.key_averages(group_by_input_shape=True)
        if getattr(e, "flops", 0)
    ]  # fmt: skip


def write_profiler_flops(prof: torch.profiler.profile, path: Path) -> Path:
    """Write torch's own FLOP estimates per (operator, input shapes) as gzipped JSON.

    ``{"format": "tracekit.profiler_flops", "version": 1, "rows": [{"name", "input_shapes",
    "count", "flops"}]}``: ``flops`` is the total over ``count`` calls (torch's
    ``FunctionEventAvg.flops``), only for operators torch has a formula for.
    """
    doc = {"format": PROFILER_FLOPS_FORMAT, "version": 1, "rows": profiler_flops_rows(prof)}
    with atomic_file(path, ".tmp.json.gz") as t:
        t.write_bytes(gzip_bytes(json.dumps(doc).encode()))
    return path


def _category_names() -> list[str]:
    """Names of the category columns of torch's ``export_memory_timeline`` JSON, in order.

    torch writes ``[times, sizes]`` where each row of ``sizes`` is ``[0, *per-category]``
    in the order of ``torch.profiler._memory_profiler._CATEGORY_TO_INDEX`` (the last,
    ``None``, is memory that the profiler could not attribute).
    """
    from torch.profiler import _memory_profiler as mp

    order = sorted(mp._CATEGORY_TO_INDEX.items(), key=lambda kv: kv[1])
    return [c.name.lower() if c is not None else "unknown" for c, _ in order]


def write_memory_timeline(prof: torch.profiler.profile, path: Path, device: str) -> Path:
    """Write the per-category memory timeline of ``device`` to ``path`` (gzipped JSON).

    Format (``format`` = ``tracekit.memory_timeline``, ``version`` 1)::

        {"format": "tracekit.memory_timeline", "version": 1, "device": "cuda:0",
         "time_unit": "us", "categories": ["parameter", "optimizer_state", "input",
         "temporary", "activation", "gradient", "autograd_detail", "unknown"],
         "times_us": [t0, t1, ...],             # profiler clock, as the trace's "ts"
         "bytes": [[b_cat0, b_cat1, ...], ...]}  # live bytes per category after t_i

    Built from ``torch.profiler.profile.export_memory_timeline`` (deprecated in torch
    2.13 in favour of memory snapshots, but still the only per-category breakdown).
    """
    categories = _category_names()
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "timeline.json"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the deprecation notice
            prof.export_memory_timeline(str(raw), device=device)
        times, sizes = json.loads(raw.read_text())
    rows = [list(map(int, r[1:])) for r in sizes]
    if any(len(r) != len(categories) for r in rows):
        raise ValueError(
            f"memory timeline rows have {len(rows[0]) if rows else 0} categories, "
            f"expected {len(categories)}"
        )
    doc = {
        "format": MEMORY_TIMELINE_FORMAT,
        "version": 1,
        "device": device,
        "time_unit": "us",
        "categories": categories,
        "times_us": [int(t) for t in times],
        "bytes": rows,
    }
    data = gzip_bytes(json.dumps(doc, separators=(",", ":")).encode())
    with atomic_file(Path(path), ".tmp") as t:
        t.write_bytes(data)
    return Path(path)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


def _collect_garbage() -> None:
    """Free the profiler's results now, between steps, not during the next ones.

    torch's profile object is a reference cycle, and the memory timeline's analysis leaves
    event trees whose parent/child links are cycles too: only the cyclic collector frees
    them. Left to it, they are collected (or traversed, again and again) inside later
    steps: on the H200 every step of the window *after* a collector window took ~7 % longer
    (24.3-24.9 against 22.8 ms, bf16 SDPA, when the FLOP table still added 85k such objects
    a cycle), and on CPU twice as long.
    """
    gc.collect()


class Profiler:
    """Context manager around ``torch.profiler.profile``; call :meth:`step` after
    every training step. Written files are listed in :attr:`traces` and
    :attr:`memory_timelines`; :attr:`memory_timeline_absent` says why there is none.

    ``schedule`` replaces the config's wait/warmup/active schedule; ``step_ranges=False``
    stops torch from opening a ``ProfilerStep#N`` range at every :meth:`step` (the
    generate workload marks its decode steps itself, so that its prefill, recorded in
    the same window, belongs to no step)."""

    def __init__(
        self,
        config: ProfilerConfig,
        out_dir: Path,
        *,
        device: torch.device,
        worker_name: str | None = None,
        on_export: Callable[[str], None] | None = None,
        schedule: Callable[[int], Any] | None = None,
        step_ranges: bool = True,
    ) -> None:
        self.config = config
        self.schedule = schedule
        self.step_ranges = step_ranges
        self.out_dir = Path(out_dir)
        self.device = device
        self.worker_name = worker_name or default_worker_name()
        self.on_export = on_export
        self.traces: list[Path] = []
        self.memory_timelines: list[Path] = []
        self.flops_tables: list[Path] = []
        self.memory_timeline_absent: str | None = config.memory_timeline_absent_reason()
        self._prof: torch.profiler.profile | None = None
        self._aborting = False

    def build(self) -> torch.profiler.profile:
        """The configured (not yet started) ``torch.profiler.profile``."""
        prof = TorchProfile(
            activities=self.activities(),
            schedule=self.schedule or self.config.schedule(),
            on_trace_ready=self._trace_ready,
            experimental_config=self.experimental_config(),
            **self.config.torch_kwargs(),
        )
        if not self.step_ranges:
            # torch (2.0 - 2.13) opens "ProfilerStep#N" in start() and step() only when
            # this attribute, set from the schedule, is true.
            prof.record_steps = False
        return prof

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        """What the profiler records (a pass of ``collectors/passes.py`` records less)."""
        return activities(self.device)

    def experimental_config(self) -> Any:
        """Kineto's experimental options (``torch._C._profiler._ExperimentalConfig``);
        None: torch's defaults. A pass of ``collectors/passes.py`` may ask for less."""
        return None

    def __enter__(self) -> Profiler:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._prof = self.build()
        self._prof.__enter__()  # type: ignore[no-untyped-call]
        return self

    def step(self) -> None:
        assert self._prof is not None, "Profiler.step() outside its with-block"
        before = self._prof.current_action
        self._prof.step()
        if (
            self._prof.current_action == torch.profiler.ProfilerAction.WARMUP
            and before != torch.profiler.ProfilerAction.WARMUP
        ):
            # A new cycle's warm-up began: the previous cycle's results are garbage now.
            _collect_garbage()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        prof, self._prof = self._prof, None
        # torch exports the open window when the with-block ends, also on an exception
        # (Ctrl-C): skip that export, the run is being abandoned.
        self._aborting = exc_type is not None
        if prof is not None:
            prof.__exit__(exc_type, exc, tb)  # type: ignore[no-untyped-call]
            del prof
            settle(self.device)  # Kineto's CUPTI teardown completes before anything else
            _collect_garbage()

    def artifacts(self) -> dict[str, Any]:
        """The manifest's artifact entries of what this profiler wrote (names relative to
        its folder)."""
        return {
            "trace": self.traces[0].name if self.traces else None,
            "traces": [p.name for p in self.traces],
            "memory_timeline": self.memory_timelines[0].name if self.memory_timelines else None,
            "memory_timeline_absent": self.memory_timeline_absent,
            "profiler_flops": self.flops_tables[0].name if self.flops_tables else None,
        }

    def _trace_ready(self, prof: torch.profiler.profile) -> None:
        if self._aborting:
            return
        stem = f"{self.worker_name}.{time.time_ns()}"
        if self.on_export:
            self.on_export("trace")
        self.traces.append(write_trace(prof, self.out_dir / f"{stem}.pt.trace.json.gz"))
        if self.config.with_flops and self.config.record_shapes:
            # Since torch 2.4 the Chrome trace no longer carries per-op "flops"; the
            # profiler's own estimate is kept beside it so the roofline can check its model.
            self.flops_tables.append(
                write_profiler_flops(prof, self.out_dir / f"{stem}.profiler_flops.json.gz")
            )
        self._memory_timeline(prof, stem)

    def _memory_timeline(self, prof: torch.profiler.profile, stem: str) -> None:
        """``<stem>.memory_timeline.json.gz``, where the options allow it."""
        if self.memory_timeline_absent is None:
            if self.on_export:
                self.on_export("memory timeline")
            device = f"cuda:{self.device.index or 0}" if self.device.type == "cuda" else "cpu"
            path = self.out_dir / f"{stem}.memory_timeline.json.gz"
            try:
                self.memory_timelines.append(write_memory_timeline(prof, path, device))
            except Exception as e:  # a torch-internal analysis; the trace is still good
                self.memory_timeline_absent = f"export_memory_timeline failed: {_one_line(e)}"


SNAPSHOT_MAX_ENTRIES = 200_000


def memory_snapshot_absent_reason(device: torch.device) -> str | None:
    if device.type != "cuda":
        return (
            "CUDA memory snapshots record the CUDA caching allocator "
            f"(torch.cuda.memory._record_memory_history); this run is on {device.type}"
        )
    return None


def snapshot_artifacts(
    enabled: bool, device: torch.device, path: Path, run: Callable[[], None]
) -> dict[str, Any]:
    """Record a snapshot of ``run()`` into ``path`` where possible; the manifest's
    ``memory_snapshot`` entry, or ``memory_snapshot_absent`` with why not."""
    if not enabled:
        return {"memory_snapshot_absent": "disabled (--no-memory-snapshot)"}
    reason = memory_snapshot_absent_reason(device)
    if reason is not None:
        return {"memory_snapshot_absent": reason}
    record_memory_snapshot(device, path, run)
    return {"memory_snapshot": Path(path).name}


def record_memory_snapshot(
    device: torch.device,
    path: Path,
    run: Callable[[], None],
    *,
    max_entries: int = SNAPSHOT_MAX_ENTRIES,
) -> Path:
    """Run ``run()`` with the CUDA allocator's history recorded, then dump the snapshot
    pickle to ``path`` atomically (open it at https://pytorch.org/memory_viz).

    Snapshots are pickles: only load them from sources you trust.
    """
    reason = memory_snapshot_absent_reason(device)
    if reason:
        raise ValueError(reason)
    start_memory_history(max_entries)
    try:
        run()
        dump_memory_snapshot(device, Path(path))
    finally:
        stop_memory_history()
    return Path(path)


def start_memory_history(max_entries: int = SNAPSHOT_MAX_ENTRIES) -> None:
    """Start recording the CUDA allocator's history with Python stacks (for a snapshot
    whose steps are not one callable: ``tracekit run`` starts and dumps at step ends)."""
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=max_entries
    )


def stop_memory_history() -> None:
    torch.cuda.memory._record_memory_history(enabled=None)


def dump_memory_snapshot(device: torch.device, path: Path) -> Path:
    """Wait for ``device``, then write the recorded snapshot pickle to ``path`` atomically."""
    torch.cuda.synchronize(device)
    with atomic_file(Path(path), ".tmp") as t:
        torch.cuda.memory._dump_snapshot(str(t))  # type: ignore[no-untyped-call]
    return Path(path)

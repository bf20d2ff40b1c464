"""The light timeline pass recorded kernels-only, through CUPTI's activity API.

Kineto with CUDA activity alone still has CUPTI record every runtime and driver API call
(each kernel launch pays for its records), which made the light pass cost a host-bound
step +8 to +23 %. :class:`KernelsPass` asks CUPTI (NVIDIA's ``cupti-python``, the
``tracekit[cupti]`` extra) for GPU activity only — kernels (NCCL's included), memcpy and
memset, on every device — and nothing else: no runtime/driver API records, no Kineto. It
runs the light pass's schedule (wait, warm-up, active, repeat) and launches the same step
markers (:class:`~tracekit.collectors.passes.StepMarker`: ``torch.cuda._sleep(1)``'s
``spin_kernel`` at each recorded step's start and one closing the last, else the host
times in a ``timeline_steps`` sidecar). CUPTI is enabled from the cycle's first step (its
one-time set-up falls in the unrecorded steps) to the end of its last recorded step; the
device is then synchronised, the records flushed and written to
``<worker>.<ts>.timeline.json.gz`` in Kineto's Chrome-trace layout (``cat`` ``kernel``,
``gpu_memcpy``, ``gpu_memset``; Kineto's argument names; names demangled as Kineto does),
with ``tracekitRecorder: "cupti-kernels"`` in its header, so ``tracekit.parse`` reads it
as any light trace. Activity before the first marker (the unrecorded steps) is left out.

:class:`TimelinePass` is the light pass collect, ``tracekit run`` and ``tracekit.profile()``
run: the kernels-only recorder where CUPTI takes it, else Kineto's CUDA-only pass
(:class:`~tracekit.collectors.passes.LightProfiler`) over the same steps, with the reason:
cupti-python missing, CUPTI refusing the callbacks or an activity kind (another profiler
holds it, an old driver), or ``TRACEKIT_TIMELINE_RECORDER=kineto``. The decision is made
when the pass starts, before any of its steps. Kineto registers its own CUPTI buffer
callbacks when it runs, so the recorder registers its callbacks again each time it
enables CUPTI (and collect runs this pass before the full one).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from tracekit.collectors.passes import (
    MARKER_KERNEL,
    STEP_STARTS_FORMAT,
    STEP_STARTS_SUFFIX,
    TIMELINE_SUFFIX,
    LightProfiler,
    StepMarker,
)
from tracekit.collectors.profiler import Profiler, ProfilerConfig
from tracekit.errors import UsageError
from tracekit.io import atomic_file, atomic_write_json, gzip_bytes

CUPTI_RECORDER = "cupti-kernels"
KINETO_RECORDER = "kineto-cuda"
RECORDER_ENV = "TRACEKIT_TIMELINE_RECORDER"  # auto (default) | kineto
RECORDER_HEADER = "tracekitRecorder"
EXTRA_HINT = "pip install 'tracekit[cupti]'"
BUFFER_BYTES = 8 * 1024 * 1024
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
CLOCK_READS = 9  # tries at mapping CUPTI's clock onto the Unix one (the best is kept)

# CUPTI_ActivityMemcpyKind and CUPTI_ActivityMemoryKind, named as Kineto names them
# (libkineto/src/output_json.cpp, CuptiActivity.cpp: memcpyName, memsetName)
_COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD",
               "HtoH", "PtoP")  # fmt: skip
_MARKER = re.compile(rf"(?:^|[^\w]){MARKER_KERNEL}(?:$|[^\w])")  # = tracekit.parse.timeline's
_MEMORY_KINDS = ("Unknown", "Pageable", "Pinned", "Device", "Array", "Managed",
                 "Device Static", "Managed Static")  # fmt: skip


class CuptiUnavailable(Exception):
    """Why the kernels-only recorder cannot run here (the pass falls back to Kineto)."""


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def load_cupti() -> Any:
    """``cupti.cupti`` of cupti-python, or :class:`CuptiUnavailable` saying why not."""
    try:
        from cupti import cupti  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:
        raise CuptiUnavailable(
            f"cupti-python is not installed ({_one_line(e)}; {EXTRA_HINT})"
        ) from None
    except Exception as e:  # e.g. OSError: libcupti or the driver missing
        raise CuptiUnavailable(f"cupti-python cannot load CUPTI ({_one_line(e)})") from None
    return cupti


def requested_recorder() -> str:
    """``TRACEKIT_TIMELINE_RECORDER``: ``auto`` (default: CUPTI where it runs) or ``kineto``."""
    value = os.environ.get(RECORDER_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "kineto"):
        raise UsageError(f"{RECORDER_ENV} must be auto or kineto, got {value!r}")
    return value


@functools.cache
def _cxa_demangle() -> Any:
    try:
        fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
        free = ctypes.CDLL(None).free
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free.argtypes = [ctypes.c_void_p]
    return fn, free


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """A kernel's name as Kineto writes it (``abi::__cxa_demangle``; as is where that
    fails or is missing)."""
    if not name.startswith("_Z"):
        return name
    cxa = _cxa_demangle()
    if cxa is None:
        return name
    fn, free = cxa
    status = ctypes.c_int(-1)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace") if status.value == 0 else name
    finally:
        free(out)


def _get(rec: Any, *names: str, default: Any = 0) -> Any:
    for n in names:
        v = getattr(rec, n, None)
        if v is not None:
            return v
    return default


def _table(values: tuple[str, ...], i: int) -> str:
    return values[i] if 0 <= i < len(values) else values[0]


def to_event(kind: str, rec: Any) -> dict[str, Any]:
    """One CUPTI activity record (kernel, memcpy, memset) as Kineto's Chrome-trace event,
    ``ts``/``dur`` still in CUPTI's ns (:func:`shift` maps them)."""
    start, end = int(rec.start), int(rec.end)
    dev, stream = int(_get(rec, "device_id", "deviceId")), int(_get(rec, "stream_id", "streamId"))
    args: dict[str, Any] = {
        "device": dev,
        "context": int(_get(rec, "context_id", "contextId")),
        "stream": stream,
        "correlation": int(_get(rec, "correlation_id", "correlationId")),
    }
    if kind == "kernel":
        name = demangle(str(_get(rec, "name", default="")))
        shared = int(_get(rec, "static_shared_memory", "staticSharedMemory")) + int(
            _get(rec, "dynamic_shared_memory", "dynamicSharedMemory")
        )
        args.update({
            "queued": 0,
            "registers per thread": int(_get(rec, "registers_per_thread", "registersPerThread")),
            "shared memory": shared,
            "grid": [int(_get(rec, f"grid_{a}", f"grid{a.upper()}")) for a in "xyz"],
            "block": [int(_get(rec, f"block_{a}", f"block{a.upper()}")) for a in "xyz"],
        })  # fmt: skip
    else:
        nbytes = int(_get(rec, "bytes"))
        args["bytes"] = nbytes
        args["memory bandwidth (GB/s)"] = nbytes / (end - start) if end > start else 0.0
        if kind == "gpu_memcpy":
            copy = _table(_COPY_KINDS, int(_get(rec, "copy_kind", "copyKind")))
            src = _table(_MEMORY_KINDS, int(_get(rec, "src_kind", "srcKind")))
            dst = _table(_MEMORY_KINDS, int(_get(rec, "dst_kind", "dstKind")))
            name = f"Memcpy {copy} ({src} -> {dst})"
        else:
            name = f"Memset ({_table(_MEMORY_KINDS, int(_get(rec, 'memory_kind', 'memoryKind')))})"
    return {"ph": "X", "cat": kind, "name": name, "pid": dev, "tid": stream,
            "ts": start, "dur": end - start, "args": args}  # fmt: skip


class KernelRecorder:
    """One CUPTI activity session: kernels, memcpy and memset records of every device,
    collected as Chrome-trace events (on CUPTI's clock) in :attr:`events` (``keep`` False:
    dropped as CUPTI hands them over, for timing the recorder alone)."""

    def __init__(self, cupti: Any, keep: bool = True) -> None:
        self.cupti = cupti
        self.keep = keep
        kinds = cupti.ActivityKind
        self.kinds = {
            int(kinds.CONCURRENT_KERNEL): "kernel",
            int(kinds.MEMCPY): "gpu_memcpy",
            int(kinds.MEMSET): "gpu_memset",
        }
        self.events: list[dict[str, Any]] = []
        self.enabled: list[int] = []
        self.offset_ns = 0  # Unix ns = CUPTI ns + offset_ns
        self.offset_error_ns = 0  # offset_ns is right to within this (half the best read)
        self.errors: list[str] = []

    def _requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0  # 0: as many records as fit

    def _completed(self, activities: Any) -> None:
        if not self.keep:
            return
        try:  # on CUPTI's thread, or within the flush: never raise into CUPTI
            for rec in activities:
                kind = self.kinds.get(int(rec.kind))
                if kind is not None:
                    self.events.append(to_event(kind, rec))
        except Exception as e:
            self.errors.append(_one_line(e))

    def start(self) -> None:
        """Register the buffer callbacks (again: Kineto replaces them when it runs) and
        enable the three kinds; :class:`CuptiUnavailable` when CUPTI refuses."""
        c = self.cupti
        try:
            c.activity_register_callbacks(self._requested, self._completed)
            for kind in self.kinds:
                c.activity_enable(kind)
                self.enabled.append(kind)
            self.offset_ns, self.offset_error_ns = clock_offset(c.get_timestamp)
        except Exception as e:
            self._disable()
            raise CuptiUnavailable(
                f"CUPTI refused the kernels-only recorder ({_one_line(e)}): another profiler "
                "may hold CUPTI, or the driver is too old"
            ) from None

    def _disable(self) -> None:
        for kind in self.enabled:
            try:
                self.cupti.activity_disable(kind)
            except Exception as e:
                self.errors.append(_one_line(e))
        self.enabled.clear()

    def stop(self) -> list[dict[str, Any]]:
        """Disable the kinds, flush CUPTI's buffers, detach CUPTI (``cuptiFinalize``: with
        the kinds merely disabled, a host-bound step ran x1.16 [1.02-1.25] slower after the
        pass on an H200, x0.95 finalized, ``benchmarks/cupti_teardown.py``; :meth:`start`
        attaches it again); the events recorded since :meth:`start`."""
        self._disable()
        try:
            self.cupti.activity_flush_all(FLUSH_FORCED)
        except Exception as e:
            self.errors.append(f"flush: {_one_line(e)}")
        try:
            self.cupti.finalize()
        except Exception as e:
            self.errors.append(f"finalize: {_one_line(e)}")
        events, self.events = self.events, []
        return events


def clock_offset(
    read: Callable[[], int], reads: int = CLOCK_READS, unix: Callable[[], int] = time.time_ns
) -> tuple[int, int]:
    """``(offset, error)``: Unix ns = ``read()``'s ns + offset, to within ±error ns.

    Each try reads the Unix clock, ``read()``, and the Unix clock again; the midpoint is
    ``read()``'s moment to within half that window. A try the OS interrupts (a shared,
    busy host) has a window of µs to ms, so the narrowest of ``reads`` tries is kept."""
    best = (0, -1)
    for _ in range(reads):
        before = unix()
        now = int(read())
        after = unix()
        if best[1] < 0 or after - before < best[1]:
            best = ((before + after) // 2 - now, after - before)
    return best[0], (best[1] + 1) // 2


def shift(events: list[dict[str, Any]], offset_ns: int, base_ns: int) -> None:
    """Events on CUPTI's ns clock to Kineto's ``ts``: µs since ``base_ns`` (Unix ns)."""
    for e in events:
        e["ts"] = round((e["ts"] + offset_ns - base_ns) / 1000.0, 3)
        e["dur"] = round(e["dur"] / 1000.0, 3)


def _metadata(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Process and thread names for the trace viewers (one GPU per device, one row per
    stream), as Kineto writes them."""
    seen = sorted({(e["pid"], e["tid"]) for e in events})
    out: list[dict[str, Any]] = []
    for dev in sorted({p for p, _ in seen}):
        out.append({"name": "process_name", "ph": "M", "ts": 0, "pid": dev, "tid": 0,
                    "args": {"name": "python3"}})  # fmt: skip
        out.append({"name": "process_labels", "ph": "M", "ts": 0, "pid": dev, "tid": 0,
                    "args": {"labels": f"GPU {dev}"}})  # fmt: skip
    for dev, stream in seen:
        out.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": dev, "tid": stream,
                    "args": {"name": f"stream {stream} "}})  # fmt: skip
    return out


def write_kernels_trace(
    path: Path, events: list[dict[str, Any]], base_ns: int, header: dict[str, Any]
) -> Path:
    """The kernels-only light trace, gzipped, atomically (Kineto's layout)."""
    doc = {
        "schemaVersion": 1,
        RECORDER_HEADER: CUPTI_RECORDER,
        **header,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "traceEvents": _metadata(events) + sorted(events, key=lambda e: e["ts"]),
    }
    data = gzip_bytes(json.dumps(doc, separators=(",", ":")).encode())
    with atomic_file(Path(path), ".tmp") as t:
        t.write_bytes(data)
    return Path(path)


def _is_marker(e: dict[str, Any]) -> bool:
    return e["cat"] == "kernel" and bool(_MARKER.search(e["name"]))


def _package_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("cupti-python")
    except Exception:
        return None


def window_events(
    events: list[dict[str, Any]], marks_ns: list[int], kernel_marks: bool, offset_ns: int
) -> list[dict[str, Any]]:
    """The events of the recorded steps (CUPTI's clock): from the first marker kernel on,
    or, with host marks, from the first mark on (less 1 ms for the clocks' offset)."""
    if kernel_marks:
        starts = [e["ts"] for e in events if _is_marker(e)]
        if not starts:
            return events
        t0 = min(starts)
    elif marks_ns:
        t0 = marks_ns[0] - offset_ns - 1_000_000
    else:
        return events
    return [e for e in events if e["ts"] >= t0]


class KernelsPass(Profiler):
    """The light timeline pass recorded by CUPTI, GPU activity only (see the module doc):
    a context manager with :meth:`step` after every step, as :class:`Profiler`."""

    def __init__(self, config: ProfilerConfig, out_dir: Path, *, device: torch.device,
                 cupti: Any, worker_name: str | None = None,
                 on_export: Callable[[str], None] | None = None,
                 marker: StepMarker | None = None) -> None:  # fmt: skip
        super().__init__(config, out_dir, device=device, worker_name=worker_name,
                         on_export=on_export)  # fmt: skip
        self.marker = marker if marker is not None else StepMarker(device)
        self.recorder = KernelRecorder(cupti)
        self.timelines: list[Path] = []
        self.step_starts: list[Path] = []
        self.records = 0
        self.notes: list[str] = []
        self._i = 0

    def __enter__(self) -> KernelsPass:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._i = 0
        self.recorder.start()  # CuptiUnavailable before any step: the caller falls back
        self._begin(started=True)
        return self

    def _begin(self, started: bool = False) -> None:
        """Step ``_i`` starts: CUPTI on at a cycle's first step, a mark at a recorded one's."""
        cfg, i = self.config, self._i
        if i >= cfg.steps:
            return
        if i % cfg.cycle == 0 and not started:
            try:
                self.recorder.start()
            except CuptiUnavailable as e:
                self.notes.append(f"cycle {i // cfg.cycle + 1} not recorded: {e}")
        if cfg.is_active(i):
            self.marker.mark()

    def step(self) -> None:
        cfg, i = self.config, self._i
        if cfg.is_active(i) and i % cfg.cycle == cfg.cycle - 1:
            self.marker.mark()  # closes the cycle's last recorded step
            self._save()
        self._i += 1
        self._begin()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.recorder.enabled:  # an open cycle (the loop ended in it): nothing written
            self.recorder.stop()
        self.marker.host_ns.clear()

    def _save(self) -> None:
        """The cycle ended: wait for its kernels, flush CUPTI, write the trace."""
        if not self.recorder.enabled:
            self.marker.host_ns.clear()
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        events = self.recorder.stop()
        marks = list(self.marker.host_ns)
        self.marker.host_ns.clear()
        offset = self.recorder.offset_ns
        kept = window_events(events, marks, self.marker.kernel, offset)
        if not kept:
            errors = "; ".join(self.recorder.errors)
            self.notes.append(
                "the kernels-only CUPTI pass recorded no GPU activity (another CUPTI client "
                f"may have taken its buffers){': ' + errors if errors else ''}"
            )
            return
        self.records += len(kept)
        base = (min(e["ts"] for e in kept) + offset) // 1_000_000_000 * 1_000_000_000
        shift(kept, offset, base)
        stem = f"{self.worker_name}.{time.time_ns()}"
        if self.on_export:
            self.on_export("timeline trace")
        header = {"cupti_python_version": _package_version(), "tracekitClockOffsetNs": offset,
                  "tracekitClockOffsetErrorNs": self.recorder.offset_error_ns}  # fmt: skip
        path = self.out_dir / f"{stem}{TIMELINE_SUFFIX}"
        self.timelines.append(write_kernels_trace(path, kept, base, header))
        if not self.marker.kernel:
            side = self.out_dir / f"{stem}{STEP_STARTS_SUFFIX}"
            atomic_write_json(side, {
                "format": STEP_STARTS_FORMAT,
                "version": 1,
                "clock": "time.time_ns() (Unix epoch, ns): trace ts = (t - baseTimeNanoseconds)",
                "starts_ns": marks,
            })  # fmt: skip
            self.step_starts.append(side)

    def artifacts(self) -> dict[str, Any]:
        arts: dict[str, Any] = {
            "timeline_trace": self.timelines[0].name if self.timelines else None,
            "timeline_traces": [p.name for p in self.timelines],
            "timeline_steps": self.step_starts[0].name if self.step_starts else None,
            "timeline_trace_absent": None,
        }
        if not self.timelines:
            arts["timeline_trace_absent"] = "; ".join(self.notes) or "no recorded cycle ended"
        return arts

    def describe(self) -> dict[str, Any]:
        """The manifest's ``profiler.timeline``: how the pass ran."""
        return {
            "recorder": CUPTI_RECORDER,
            "fallback_reason": None,
            "activities": ["kernel", "memcpy", "memset"],
            "api": f"CUPTI activity API (cupti-python {_package_version() or '?'}): no runtime "
            "or driver API records, no Kineto",
            "options": "none (no record_shapes, profile_memory, with_flops, with_stack)",
            "schedule": {k: getattr(self.config, k) for k in ("wait", "warmup", "active")},
            "order": "before the full pass, same schedule",
            "step_marker": self.marker.describe(),
            "records": self.records,
            "notes": list(self.notes),
        }


class TimelinePass(Profiler):
    """The light timeline pass: :class:`KernelsPass` where CUPTI takes it, else ``kineto``
    (Kineto's CUDA-only :class:`~tracekit.collectors.passes.LightProfiler`) over the same
    steps (``kineto`` None: :class:`LightProfiler`); :attr:`recorder` and
    :attr:`fallback_reason` say which ran and why."""

    def __init__(self, config: ProfilerConfig, out_dir: Path, *, device: torch.device,
                 worker_name: str | None = None,
                 on_export: Callable[[str], None] | None = None,
                 kineto: Callable[..., Profiler] | None = None) -> None:  # fmt: skip
        super().__init__(config, out_dir, device=device, worker_name=worker_name,
                         on_export=on_export)  # fmt: skip
        self.requested = requested_recorder()
        self.kineto = kineto
        self.inner: Profiler | None = None
        self.recorder: str | None = None
        self.fallback_reason: str | None = None

    def _kw(self) -> dict[str, Any]:
        return {"device": self.device, "worker_name": self.worker_name,
                "on_export": self.on_export}  # fmt: skip

    def __enter__(self) -> TimelinePass:
        why = f"{RECORDER_ENV}=kineto" if self.requested == "kineto" else None
        if why is None:
            try:
                inner: Profiler = KernelsPass(self.config, self.out_dir, cupti=load_cupti(),
                                              **self._kw())  # fmt: skip
                inner.__enter__()
                self.inner, self.recorder = inner, CUPTI_RECORDER
                return self
            except CuptiUnavailable as e:
                why = str(e)
        self.fallback_reason, self.recorder = why, KINETO_RECORDER
        kineto = self.kineto or LightProfiler
        self.inner = kineto(self.config, self.out_dir, **self._kw())
        self.inner.__enter__()
        return self

    def step(self) -> None:
        assert self.inner is not None, "TimelinePass.step() outside its with-block"
        self.inner.step()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.inner is not None:
            self.inner.__exit__(exc_type, exc, tb)

    def artifacts(self) -> dict[str, Any]:
        if self.inner is None:
            return {"timeline_trace": None, "timeline_traces": [], "timeline_steps": None}
        return self.inner.artifacts()

    def describe(self) -> dict[str, Any]:
        """The manifest's ``profiler.timeline``, with ``recorder`` (``cupti-kernels`` or
        ``kineto-cuda``) and ``fallback_reason`` (why not CUPTI; None when it ran)."""
        inner = getattr(self.inner, "describe", None)
        doc: dict[str, Any] = dict(inner()) if callable(inner) else {}
        return {**doc, "recorder": self.recorder, "fallback_reason": self.fallback_reason}


def recorder_line(timeline: Any) -> str | None:
    """The summary's line on the light pass's recorder (``timeline``: the manifest's
    ``profiler.timeline``; None where it says nothing of one)."""
    if not isinstance(timeline, dict) or not timeline.get("recorder"):
        return None
    if timeline["recorder"] == CUPTI_RECORDER:
        return "light pass recorder: CUPTI, kernels/memcpy/memset only (cupti-kernels)"
    why = timeline.get("fallback_reason")
    return "light pass recorder: Kineto, CUDA activity (kineto-cuda)" + (
        f"; not CUPTI kernels-only: {why}" if why else ""
    )

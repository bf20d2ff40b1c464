"""Parsed trace tables -> one XSpace, following the conventions xprof's GPU converters read.

Pure: frames in, one protobuf message out (no I/O). docs/xspace.md explains every
name used here and where in openxla/xprof (and openxla/xla's tsl profiler utils)
it is read. In short:

* ``/host:CPU``: one line per CPU thread with its operators, user annotations and
  CUDA runtime calls (nested by time, as on the thread), plus one line per
  allocator with ``MemoryAllocation``/``MemoryDeallocation`` events.
* ``/device:GPU:N``: one line per stream (``Stream #7(Kernel,MemcpyH2D)``) with
  kernels, memcpys and memsets, carrying ``correlation_id``, ``kernel_details``
  or ``memcpy_details`` and ``tf_op`` (the launching operator).
* Steps: each ``ProfilerStep#N`` annotation is a user-defined root event (``_r``,
  ``step_num``) and a context producer (``_pt``/``_p``); top-level events of other
  threads in that step are its consumers (``_ct``/``_c``). xprof's own grouping
  then gives every event, and through ``correlation_id`` every kernel, the step's
  ``group_id``, which its step-time, overview and memory tools read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from tracekit.xspace.proto import new_xspace

HOST_PLANE = "/host:CPU"
GPU_PLANE_PREFIX = "/device:GPU:"
HOST_PLANE_ID = 0

# Context type for the step producer/consumer stats: ContextType::kGeneric = 0
# (tsl/profiler/lib/context_types.h).
GENERIC_CONTEXT = 0

_PS_PER_NS = 1000


class TraceTables(Protocol):
    """What the exporter reads: tracekit.parse.Trace satisfies it (schema.py columns)."""

    @property
    def kernels(self) -> pd.DataFrame: ...
    @property
    def ops(self) -> pd.DataFrame: ...
    @property
    def memory(self) -> pd.DataFrame: ...
    @property
    def steps(self) -> pd.DataFrame: ...
    @property
    def runtime(self) -> pd.DataFrame: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


# ---------------------------------------------------------------- plane builder


class _Plane:
    """Builds one XPlane: interns event and stat metadata like tsl's XPlaneBuilder."""

    def __init__(self, plane: Any) -> None:
        self.msg = plane
        self._events: dict[str, int] = {}
        # One namespace for stat names and ref'd string values, as in XPlaneBuilder:
        # a value string never gets a second metadata entry with the same name.
        self._stats: dict[str, int] = {}

    def event_id(self, name: str, display_name: str = "") -> int:
        mid = self._events.get(name)
        if mid is None:
            mid = len(self._events) + 1
            self._events[name] = mid
            md = self.msg.event_metadata[mid]
            md.id = mid
            md.name = name
            if display_name and display_name != name:
                md.display_name = display_name
        return mid

    def stat_id(self, name: str) -> int:
        sid = self._stats.get(name)
        if sid is None:
            sid = len(self._stats) + 1
            self._stats[name] = sid
            md = self.msg.stat_metadata[sid]
            md.id = sid
            md.name = name
        return sid

    def add_stat(self, holder: Any, name: str, value: object) -> None:
        """Append a stat to ``holder.stats``; the XStat value field follows the type."""
        sid = self.stat_id(name)
        if type(value) is int:  # the common case first (not bool: type() is exact)
            holder.stats.add(metadata_id=sid, int64_value=value)
        elif isinstance(value, bool):
            holder.stats.add(metadata_id=sid, int64_value=int(value))
        elif isinstance(value, int):
            holder.stats.add(metadata_id=sid, int64_value=value)
        elif isinstance(value, float):
            holder.stats.add(metadata_id=sid, double_value=value)
        elif isinstance(value, bytes):
            holder.stats.add(metadata_id=sid, bytes_value=value)
        else:
            holder.stats.add(metadata_id=sid, str_value=str(value))

    def add_ref(self, holder: Any, name: str, value: str) -> None:
        """A string stat stored once per plane (``ref_value``), for repeated values."""
        holder.stats.add(metadata_id=self.stat_id(name), ref_value=self.stat_id(value))


# ------------------------------------------------------------------ host events


@dataclass
class _HostEvent:
    ts: int
    dur: int
    name: str
    order: int  # tie-break: operators before the runtime calls they enclose
    step: int
    stats: list[tuple[str, object]] = field(default_factory=list)
    step_marker: int | None = None  # N for ProfilerStep#N


def _present(value: object) -> bool:
    if type(value) is int or type(value) is str:  # most cells: no NaN, no NA
        return True
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return value is not pd.NA


def _int(value: object, default: int = -1) -> int:
    if type(value) is int:  # most cells (exact type: a bool goes through int() below)
        return value
    return int(value) if _present(value) else default  # type: ignore[call-overload]


def _records(df: pd.DataFrame, cols: Sequence[str]) -> Iterator[dict[str, object]]:
    """Rows as dicts, only the columns that exist (missing ones read as None)."""
    have = [c for c in cols if c in df.columns]
    for row in zip(*(df[c].tolist() for c in have), strict=True):
        rec: dict[str, object] = dict.fromkeys(cols)
        rec.update(zip(have, row, strict=True))
        yield rec


def _step_markers(ops: pd.DataFrame, steps: pd.DataFrame) -> dict[int, int]:
    """op_id of each step's ProfilerStep annotation -> step number."""
    if steps.empty or ops.empty:
        return {}
    key = ops.set_index(["name", "ts", "dur"])["op_id"]
    key = key[~key.index.duplicated()]
    out: dict[int, int] = {}
    for rec in _records(steps, ["step", "name", "cpu_ts", "cpu_dur"]):
        op_id = key.get((rec["name"], rec["cpu_ts"], rec["cpu_dur"]))
        if op_id is not None:
            out[int(op_id)] = int(rec["step"])  # type: ignore[call-overload]
    return out


_OP_STATS = ("external_id", "sequence_number", "input_dims", "input_types", "module")


def _host_events(
    trace: TraceTables, launch_device: Mapping[int, int]
) -> dict[tuple[int, int], list[_HostEvent]]:
    """Operators and runtime calls grouped by (pid, tid)."""
    markers = _step_markers(trace.ops, trace.steps)
    threads: dict[tuple[int, int], list[_HostEvent]] = {}
    cols = ["op_id", "name", "pid", "tid", "ts", "dur", "step", *_OP_STATS]
    for rec in _records(trace.ops, cols):
        ev = _HostEvent(
            ts=_int(rec["ts"], 0),
            dur=max(_int(rec["dur"], 0), 0),
            name=str(rec["name"]),
            order=0,
            step=_int(rec["step"]),
        )
        for name in ("external_id", "sequence_number"):
            if _int(rec[name]) >= 0:
                ev.stats.append((name, _int(rec[name])))
        for name in ("input_dims", "input_types", "module"):
            if _present(rec[name]):
                ev.stats.append((name, str(rec[name])))
        op_id = _int(rec["op_id"])
        if op_id in markers:
            ev.step_marker = markers[op_id]
        threads.setdefault((_int(rec["pid"], 0), _int(rec["tid"], 0)), []).append(ev)
    rcols = ["name", "pid", "tid", "ts", "dur", "correlation", "external_id", "cbid", "step"]
    for rec in _records(trace.runtime, rcols):
        ev = _HostEvent(
            ts=_int(rec["ts"], 0),
            dur=max(_int(rec["dur"], 0), 0),
            name=str(rec["name"]),
            order=1,
            step=_int(rec["step"]),
        )
        corr = _int(rec["correlation"])
        if corr >= 0:
            ev.stats.append(("correlation_id", corr))
            if corr in launch_device:
                ev.stats.append(("device_id", launch_device[corr]))
        for name in ("external_id", "cbid"):
            value = _int(rec[name])
            if value >= 0:
                ev.stats.append((name, value))
        threads.setdefault((_int(rec["pid"], 0), _int(rec["tid"], 0)), []).append(ev)
    for events in threads.values():
        events.sort(key=lambda e: (e.ts, -e.dur, e.order))
    return threads


def _roots(events: Sequence[_HostEvent]) -> Iterator[tuple[_HostEvent, bool]]:
    """Yield (event, is_root): root = not inside an earlier event of the same line."""
    open_ends: list[int] = []
    for ev in events:
        while open_ends and open_ends[-1] <= ev.ts:
            open_ends.pop()
        yield ev, not open_ends
        open_ends.append(ev.ts + ev.dur)


# ------------------------------------------------------------------ device side

_MEMCPY_KINDS = {"htod": "H2D", "dtoh": "D2H", "dtod": "D2D", "ptop": "P2P", "htoh": "H2H"}


def memcpy_kind(name: str) -> str:
    """'Memcpy HtoD (Pageable -> Device)' -> 'MemcpyH2D' (XLA's line-type names)."""
    m = re.search(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH)\b", name, flags=re.IGNORECASE)
    return f"Memcpy{_MEMCPY_KINDS[m.group(1).lower()]}" if m else "MemcpyOther"


# Kineto's copy directions -> the prefixes xprof's tf_op_utils GetMemcpyOp knows.
_XPROF_MEMCPY = {
    "htod": "MemcpyHToD",
    "dtoh": "MemcpyDToH",
    "dtod": "MemcpyDToD",
    "htoh": "MemcpyHToH",
}


def device_event_name(kind: str, name: str) -> tuple[str, str]:
    """(XEventMetadata name, display name) of a GPU activity.

    xprof classifies copies by the event name's prefix (``MemcpyHToD``...: host to
    device, device to host, device to device time in the overview page); Kineto
    writes ``Memcpy HtoD (Pageable -> Device)``. Copies get the prefix xprof knows
    and keep Kineto's name as the display name, which the trace viewer shows.
    """
    if kind == "memcpy":
        m = re.match(r"Memcpy (HtoD|DtoH|DtoD|HtoH)\b(.*)", name, flags=re.IGNORECASE | re.S)
        if m:
            return _XPROF_MEMCPY[m.group(1).lower()] + m.group(2), name
    return name, name


def kernel_details(rec: Mapping[str, object]) -> str:
    """The ``kernel_details`` stat in the format xprof's ParseKernelLaunchParams reads.

    Kineto reports shared memory per block as one number (static + dynamic); it is
    written as ``dynamic_shared`` with ``static_shared:0``, so xprof's "Shared Mem
    bytes" column (static + dynamic) shows the trace's figure. No ``occ_pct``: the
    trace has no theoretical occupancy.
    """

    def dim(prefix: str) -> str:
        return ",".join(str(_int(rec[f"{prefix}_{a}"], 1)) for a in "xyz")

    return (
        f"regs:{_int(rec['registers_per_thread'], 0)} static_shared:0"
        f" dynamic_shared:{_int(rec['shared_memory'], 0)}"
        f" grid:{dim('grid')} block:{dim('block')}"
    )


_KERNEL_COLS = [
    "kind",
    "name",
    "device",
    "stream",
    "ts",
    "dur",
    "correlation",
    "external_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "shared_memory",
    "bytes",
    "op_name",
]


# ------------------------------------------------------------------------ space


def _device_props(meta: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    out: dict[int, Mapping[str, Any]] = {}
    for i, props in enumerate(meta.get("device_properties") or []):
        if isinstance(props, Mapping):
            out[_int(props.get("id"), i)] = props
    return out


def _vendor(trace: TraceTables) -> str:
    if "name" not in trace.runtime.columns or trace.runtime.empty:
        return "Nvidia"
    hip = trace.runtime["name"].astype(str).str.startswith("hip")
    return "AMD" if bool(hip.any()) else "Nvidia"


def _span_ns(frames: Iterable[pd.DataFrame]) -> int:
    end = 0
    for df in frames:
        if not df.empty and "ts" in df.columns:
            dur = df["dur"] if "dur" in df.columns else 0
            end = max(end, int((df["ts"] + dur).max()))
    return end


def build_xspace(trace: TraceTables, host: str = "localhost") -> Any:
    """Build the XSpace message for one trace (one host)."""
    space = new_xspace()
    space.hostnames.append(host)
    # Lines start at 0 = the trace start: XSpace timestamps are normalized to the
    # profile start before xprof reads them (tsl NormalizeTimestamps); epoch
    # nanoseconds would overflow the trace viewer's picosecond clock.
    start_ns = 0
    span_ps = _span_ns([trace.ops, trace.runtime, trace.kernels, trace.memory]) * _PS_PER_NS
    kernels = trace.kernels
    launch_device: dict[int, int] = {}
    if not kernels.empty:
        for corr, dev in zip(
            kernels["correlation"].tolist(), kernels["device"].tolist(), strict=True
        ):
            if _present(corr) and int(corr) >= 0:
                launch_device.setdefault(int(corr), int(dev))

    host_plane = _Plane(space.planes.add(id=HOST_PLANE_ID, name=HOST_PLANE))
    threads = _host_events(trace, launch_device)
    # Steps whose ProfilerStep annotation is in the trace: only they can be
    # consumed (a trace without markers gets no context stats at all).
    produced = {e.step_marker for evs in threads.values() for e in evs if e.step_marker is not None}
    pids = {pid for pid, _ in threads}
    used_ids: set[int] = set()
    for (pid, tid), events in sorted(threads.items()):
        line_id = tid if tid not in used_ids else max(used_ids) + 1
        used_ids.add(line_id)
        name = f"Thread {tid}" if len(pids) == 1 else f"pid {pid} Thread {tid}"
        line = host_plane.msg.lines.add(
            id=line_id, display_id=line_id, name=name, timestamp_ns=start_ns, duration_ps=span_ps
        )
        has_marker = any(e.step_marker is not None for e in events)
        for ev, is_root in _roots(events):
            xe = line.events.add(
                metadata_id=host_plane.event_id(ev.name),
                offset_ps=ev.ts * _PS_PER_NS,
                duration_ps=ev.dur * _PS_PER_NS,
            )
            for sname, value in ev.stats:
                host_plane.add_stat(xe, sname, value)
            if ev.step_marker is not None:
                # User-defined root of step N (tsl group_events: `_r` marks a root,
                # `step_num` names the group) and producer of its context.
                host_plane.add_stat(xe, "_r", 1)
                host_plane.add_stat(xe, "step_num", ev.step_marker)
                host_plane.add_stat(xe, "_pt", GENERIC_CONTEXT)
                host_plane.add_stat(xe, "_p", ev.step_marker)
            elif is_root and ev.step in produced and not has_marker:
                host_plane.add_stat(xe, "_ct", GENERIC_CONTEXT)
                host_plane.add_stat(xe, "_c", ev.step)
    _memory_lines(trace, host_plane, used_ids, produced, start_ns, span_ps)

    props = _device_props(trace.meta)
    vendor = _vendor(trace)
    if not kernels.empty:
        for device in sorted(int(d) for d in kernels["device"].unique()):
            dev_rows = kernels[kernels["device"] == device]
            _device_plane(space, device, dev_rows, props.get(device), vendor, start_ns, span_ps)
    return space


def _memory_lines(
    trace: TraceTables,
    plane: _Plane,
    used_ids: set[int],
    produced: set[int],
    start_ns: int,
    span_ps: int,
) -> None:
    """MemoryAllocation/MemoryDeallocation events, one line per allocator.

    Stats follow xprof's memory profile reader (xplane_to_memory_profile.cc):
    ``bytes_allocated`` is PyTorch's allocated total after the event; nothing is
    "stack" (``bytes_reserved`` 0) because the caching allocator's reserve is not
    in use; the reserve goes to an extra ``total_reserved`` stat for the trace
    viewer. ``peak_bytes_in_use`` is the running maximum within the trace.
    """
    mem = trace.memory
    if mem.empty:
        return
    capacity = {
        dev: _int(p.get("totalGlobalMem"), -1) for dev, p in _device_props(trace.meta).items()
    }
    mem = mem.sort_values("ts", kind="stable")
    cols = [
        "ts",
        "device_type",
        "device",
        "addr",
        "bytes",
        "total_allocated",
        "total_reserved",
        "op_name",
        "step",
    ]
    by_alloc: dict[str, list[dict[str, object]]] = {}
    for rec in _records(mem, cols):
        gpu = _int(rec["device_type"], 0) != 0
        name = f"GPU_{_int(rec['device'], 0)}" if gpu else "CPU"
        by_alloc.setdefault(name, []).append(rec)
    next_id = max(used_ids, default=0) + 1
    for alloc, recs in sorted(by_alloc.items()):
        line = plane.msg.lines.add(
            id=next_id,
            display_id=next_id,
            name=f"Memory {alloc}",
            timestamp_ns=start_ns,
            duration_ps=span_ps,
        )
        used_ids.add(next_id)
        next_id += 1
        peak = 0
        for rec in recs:
            peak = max(peak, _int(rec["total_allocated"], 0))
            _memory_event(plane, line, rec, alloc, peak, capacity, produced)


def _memory_event(
    plane: _Plane,
    line: Any,
    rec: Mapping[str, object],
    alloc: str,
    peak: int,
    capacity: Mapping[int, int],
    produced: set[int],
) -> None:
    """One allocator event on ``line``, with the stats xprof's memory profile reads."""
    delta = _int(rec["bytes"], 0)
    total = _int(rec["total_allocated"], 0)
    xe = line.events.add(
        metadata_id=plane.event_id("MemoryAllocation" if delta >= 0 else "MemoryDeallocation"),
        offset_ps=_int(rec["ts"], 0) * _PS_PER_NS,
        duration_ps=0,
    )
    plane.add_ref(xe, "allocator_name", alloc)
    plane.add_stat(xe, "bytes_allocated", total)
    plane.add_stat(xe, "bytes_reserved", 0)
    plane.add_stat(xe, "peak_bytes_in_use", peak)
    cap = capacity.get(_int(rec["device"], -1), -1) if alloc != "CPU" else -1
    if cap > 0:
        plane.add_stat(xe, "bytes_available", max(cap - total, 0))
    plane.add_stat(xe, "requested_bytes", abs(delta))
    plane.add_stat(xe, "allocation_bytes", abs(delta))
    plane.add_stat(xe, "addr", _int(rec["addr"], 0))
    if _present(rec["total_reserved"]):
        plane.add_stat(xe, "total_reserved", _int(rec["total_reserved"]))
    if _present(rec["op_name"]):
        plane.add_ref(xe, "tf_op", str(rec["op_name"]))
    step = _int(rec["step"])
    if step in produced:
        plane.add_stat(xe, "_ct", GENERIC_CONTEXT)
        plane.add_stat(xe, "_c", step)


def _device_plane(
    space: Any,
    device: int,
    rows: pd.DataFrame,
    props: Mapping[str, Any] | None,
    vendor: str,
    start_ns: int,
    span_ps: int,
) -> None:
    plane = _Plane(space.planes.add(id=device + 1, name=f"{GPU_PLANE_PREFIX}{device}"))
    _device_caps(plane, props, vendor)
    rows = rows.sort_values(["stream", "ts"], kind="stable")
    for stream in sorted(int(x) for x in rows["stream"].unique()):
        srows = rows[rows["stream"] == stream]
        kinds: list[str] = []
        for kind, name in zip(srows["kind"].tolist(), srows["name"].tolist(), strict=True):
            label = (
                "Kernel"
                if kind == "kernel"
                else "Memset"
                if kind == "memset"
                else memcpy_kind(str(name))
            )
            if label not in kinds:
                kinds.append(label)
        line = plane.msg.lines.add(
            id=stream,
            display_id=stream,
            name=f"Stream #{stream}({','.join(kinds)})",
            timestamp_ns=start_ns,
            duration_ps=span_ps,
        )
        for rec in _records(srows, _KERNEL_COLS):
            _device_event(plane, line, rec)


def _device_caps(plane: _Plane, props: Mapping[str, Any] | None, vendor: str) -> None:
    """Device capabilities, as xla's CUPTI collector writes them (GetDeviceCaps reads
    them for the run environment). The trace has no clock rate or memory bandwidth, so
    xprof's peak FLOP/s and bandwidth stay 0."""
    plane.add_stat(plane.msg, "device_vendor", vendor)
    if not props:
        return
    if _present(props.get("name")):
        plane.add_stat(plane.msg, "gpu_device_name", str(props["name"]))
    for stat, key in (
        ("core_count", "numSms"),
        ("memory_size", "totalGlobalMem"),
        ("compute_cap_major", "computeMajor"),
        ("compute_cap_minor", "computeMinor"),
    ):
        if _present(props.get(key)):
            plane.add_stat(plane.msg, stat, int(props[key]))


def _device_event(plane: _Plane, line: Any, rec: Mapping[str, object]) -> None:
    """One kernel, memcpy or memset on its stream's line."""
    xe = line.events.add(
        metadata_id=plane.event_id(*device_event_name(str(rec["kind"]), str(rec["name"]))),
        offset_ps=_int(rec["ts"], 0) * _PS_PER_NS,
        duration_ps=max(_int(rec["dur"], 0), 0) * _PS_PER_NS,
    )
    corr = _int(rec["correlation"])
    if corr >= 0:
        plane.add_stat(xe, "correlation_id", corr)
    kind = rec["kind"]
    if kind == "kernel":
        plane.add_ref(xe, "kernel_details", kernel_details(rec))
    elif kind == "memcpy":
        # Newline-separated so both of xprof's parsers (space/newline for
        # kernel details, ':'/newline for memcpy num_bytes) can read it.
        label = memcpy_kind(str(rec["name"]))
        plane.add_ref(xe, "memcpy_details", f"kind:{label}\nnum_bytes:{_int(rec['bytes'], 0)}")
    elif kind == "memset":
        plane.add_ref(xe, "Memset_details", f"num_bytes:{_int(rec['bytes'], 0)}")
    if _present(rec["op_name"]):
        plane.add_ref(xe, "tf_op", str(rec["op_name"]))
    ext = _int(rec["external_id"])
    if ext >= 0:
        plane.add_stat(xe, "external_id", ext)

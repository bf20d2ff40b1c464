"""Write a trace as ``LOGDIR/plugins/profile/<run>/<host>.xplane.pb`` and read it back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.errors import TraceError, UsageError
from tracekit.io import atomic_write_bytes
from tracekit.xspace.build import TraceTables, build_xspace
from tracekit.xspace.proto import parse_xspace

XPLANE_SUFFIX = ".xplane.pb"

# Files xprof derives from the XSpaces of a run folder and then serves instead of
# re-reading them (xprof/convert/repository.cc kHostDataSuffixes, and the
# plugin's cache_version.txt). A new export makes them stale.
XPROF_CACHE_SUFFIXES = (
    ".op_stats_v2.pb",
    ".dcn_collective_stats.pb",
    ".smart_suggestion.pb",
    ".SSTABLE",
)
XPROF_CACHE_FILES = ("cache_version.txt",)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_TRACE_SUFFIXES = (".gz", ".json", ".trace", ".pt")


def _check_name(kind: str, name: str) -> str:
    if not _NAME.fullmatch(name) or name.endswith(XPLANE_SUFFIX):
        raise UsageError(
            f"invalid {kind} name {name!r}: use letters, digits and _ . + - "
            "(no slashes, not starting with a dot)"
        )
    return name


def _sanitize(name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("._")
    return clean or "trace"


def default_run_name(trace: object) -> str:
    """The run folder's name, or the trace file's name without .pt.trace.json.gz."""
    run_dir = getattr(trace, "run_dir", None)
    if run_dir is not None:  # a run folder from `tracekit collect`: name the run after it
        return _sanitize(Path(str(run_dir)).resolve().name)
    path = getattr(trace, "path", None)
    if path is None:
        return "trace"
    p = Path(str(path))
    if getattr(trace, "manifest", None) is not None and p.is_file():
        p = p.parent
    name = p.name
    while True:
        stem, dot, suffix = name.rpartition(".")
        if dot and stem and f".{suffix}" in _TRACE_SUFFIXES:
            name = stem
        else:
            break
    return _sanitize(name)


def default_host(trace: TraceTables) -> str:
    """``rank<N>`` for a distributed trace (so ranks exported into one run differ)."""
    info = trace.meta.get("distributed_info") or {}
    rank = info.get("rank") if isinstance(info, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return f"rank{rank}"
    return "localhost"


def xplane_path(logdir: Path | str, run: str, host: str) -> Path:
    """Where xprof looks for the XSpace of ``host`` in ``run``."""
    return (
        Path(logdir)
        / "plugins"
        / "profile"
        / _check_name("run", run)
        / f"{_check_name('host', host)}{XPLANE_SUFFIX}"
    )


def clear_xprof_cache(run_dir: Path) -> list[Path]:
    """Remove the files xprof cached from earlier XSpaces of this run."""
    removed: list[Path] = []
    if not run_dir.is_dir():
        return removed
    for f in run_dir.iterdir():
        if f.is_file() and (f.name in XPROF_CACHE_FILES or f.name.endswith(XPROF_CACHE_SUFFIXES)):
            f.unlink(missing_ok=True)
            removed.append(f)
    return removed


def export_xspace(
    trace: TraceTables,
    logdir: Path | str,
    run: str | None = None,
    host: str | None = None,
) -> Path:
    """Write ``trace`` as an XSpace that TensorBoard's PROFILE tab (xprof) opens.

    Returns the path of ``LOGDIR/plugins/profile/<run>/<host>.xplane.pb``. The file
    is written atomically; xprof's caches of the run folder are cleared so the
    tab shows the new file, not an earlier export.
    """
    run = default_run_name(trace) if run is None else run
    host = default_host(trace) if host is None else host
    path = xplane_path(logdir, run, host)
    data = build_xspace(trace, host=host).SerializeToString()
    atomic_write_bytes(path, data)
    clear_xprof_cache(path.parent)
    return path


def read_xspace(path: Path | str) -> Any:
    """Parse a ``.xplane.pb`` file (tracekit's or any other) into an XSpace message."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        return parse_xspace(data)
    except Exception as e:  # protobuf raises DecodeError (a subclass) or RuntimeError
        raise TraceError(f"{path} is not an XSpace protobuf: {e}") from e


def line_summary(space: Any) -> pd.DataFrame:
    """One row per line: plane, line id and name, event count and summed durations.

    Durations are nanoseconds (the XSpace stores picoseconds); ``event_names``
    counts distinct event names on the line.
    """
    rows = []
    for plane in space.planes:
        for line in plane.lines:
            total_ps = 0
            names: set[int] = set()
            for ev in line.events:
                total_ps += ev.duration_ps
                names.add(ev.metadata_id)
            rows.append(
                {
                    "plane": plane.name,
                    "line_id": line.id,
                    "line": line.name,
                    "events": len(line.events),
                    "dur_ns": total_ps // 1000,
                    "event_names": len(names),
                }
            )
    cols = ["plane", "line_id", "line", "events", "dur_ns", "event_names"]
    out: pd.DataFrame = pd.DataFrame(rows, columns=cols)
    return out


def event_table(space: Any, plane_prefix: str = "") -> pd.DataFrame:
    """Every event of the planes whose name starts with ``plane_prefix``, decoded.

    Columns: plane, line_id, line, name (the display name, as the trace viewer
    shows it), metadata_name, ts_ns, dur_ns and one column per stat name (ref
    values resolved to their strings). For tests and hand checks.
    """
    rows: list[dict[str, object]] = []
    for plane in space.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        ev_names = {k: v.display_name or v.name for k, v in plane.event_metadata.items()}
        md_names = {k: v.name for k, v in plane.event_metadata.items()}
        st_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            base_ns = line.timestamp_ns
            for ev in line.events:
                row: dict[str, object] = {
                    "plane": plane.name,
                    "line_id": line.id,
                    "line": line.name,
                    "name": ev_names.get(ev.metadata_id, ""),
                    "metadata_name": md_names.get(ev.metadata_id, ""),
                    "ts_ns": base_ns + ev.offset_ps // 1000,
                    "dur_ns": ev.duration_ps // 1000,
                }
                for st in ev.stats:
                    kind = st.WhichOneof("value")
                    value = getattr(st, kind) if kind else None
                    if kind == "ref_value":
                        value = st_names.get(int(st.ref_value), "")
                    row[st_names.get(st.metadata_id, str(st.metadata_id))] = value
                rows.append(row)
    out: pd.DataFrame = pd.DataFrame(rows)
    return out

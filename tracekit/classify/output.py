"""Writing a :class:`~tracekit.classify.roofline.Classification` to a folder, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.classify.result import Classification, in_scope
from tracekit.classify.schema import ARROW
from tracekit.io import atomic_dir, atomic_write_json
from tracekit.manifest import read_manifest
from tracekit.parse.cpuview import CPU_NOTE

FILES = {
    "op_roofline": "op_roofline.parquet",
    "kernel_roofline": "kernel_roofline.parquet",
    "classes": "classes.parquet",
    "step_summary": "step_summary.parquet",
    "device": "device.parquet",
    "counters": "counters.parquet",
}


def to_arrow(df: pd.DataFrame, table: str) -> pa.Table:
    """``df`` as an Arrow table with exactly the documented schema of ``table``."""
    schema = ARROW[table]
    arrays = []
    for f in schema:
        col = df[f.name] if f.name in df.columns else pd.Series([None] * len(df), dtype=object)
        if pa.types.is_string(f.type):
            vals = [
                None if (v is None or (isinstance(v, float) and np.isnan(v))) else str(v)
                for v in col.astype(object)
            ]
            arrays.append(pa.array(vals, type=f.type))
        elif pa.types.is_floating(f.type):
            arrays.append(
                pa.array(
                    pd.to_numeric(col, errors="coerce").to_numpy(dtype=float),
                    type=f.type,
                    from_pandas=True,
                )
            )
        elif pa.types.is_boolean(f.type):
            arrays.append(pa.array(col.fillna(False).to_numpy(dtype=bool), type=f.type))
        else:
            arrays.append(
                pa.array(
                    pd.to_numeric(col, errors="coerce").fillna(-1).to_numpy(dtype=np.int64),
                    type=f.type,
                )
            )
    return pa.Table.from_arrays(arrays, schema=schema)


def write_classification(
    result: Classification, out: Path, *, extra: dict[str, Any] | None = None
) -> Path:
    """Write the tables as Parquet plus ``classify.json`` (device, notes, classes, steps)."""
    out = Path(out)
    frames = {
        "op_roofline": result.ops,
        "kernel_roofline": result.kernels,
        "classes": result.classes,
        "step_summary": result.steps,
        "device": result.device_frame(),
    }
    if result.counters is not None:
        frames["counters"] = result.counters
    with atomic_dir(out) as tmp:
        for table, df in frames.items():
            pq.write_table(to_arrow(df, table), tmp / FILES[table])
        if result.unmatched is not None and len(result.unmatched):
            result.unmatched.astype(str).to_parquet(tmp / "counters_unmatched.parquet")
        summary = result.summary()
        if extra:
            summary.update(extra)
        atomic_write_json(tmp / "classify.json", summary)
    return out


def default_out(path: Path) -> Path:
    """``RUN/classify/`` for a folder, ``TRACE.classify/`` next to a trace file."""
    path = Path(path)
    if path.is_dir():
        return path / "classify"
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return path.with_name(name + ".classify")


def counters_of(path: Path, manifest: dict[str, Any] | None) -> Path | None:
    """The counters CSV of a run folder, if ``tracekit collect --counters`` wrote one."""
    if not path.is_dir():
        return None
    m = read_manifest(manifest)
    cand = m.artifacts.counters if m is not None else None
    for p in ([path / str(cand)] if cand else []) + [path / "counters.csv"]:
        if p.is_file():
            return p
    return None


def describe(result: Classification, dest: Path) -> str:
    """A few lines for the terminal: device, class shares, bound shares, notes."""
    dev = result.device
    lines = [
        f"device: {dev.device_name or 'unknown'}"
        + (f" (spec {dev.spec_key})" if dev.spec_key else "")
    ]
    # a CPU run's operators stand in for kernels (tracekit.parse.cpuview): its time is the CPU's
    where = "CPU" if any(n.startswith(CPU_NOTE) for n in result.notes) else "GPU"
    c = result.classes[result.classes["gpu_time"] > 0].sort_values("gpu_time", ascending=False)
    shares = ", ".join(f"{r['class']} {r['time_share_pct']:.1f}%" for _, r in c.iterrows())
    lines.append(f"{where} time by class: {shares or f'no {where} activity'}")
    k = result.kernels[in_scope(result.kernels)] if len(result.kernels) else result.kernels
    if len(k):
        t = float(k["dur"].sum()) or 1.0
        mem = 100 * float(k.loc[k["bound"] == "memory-bound", "dur"].sum()) / t
        comp = 100 * float(k.loc[k["bound"] == "compute-bound", "dur"].sum()) / t
        lines.append(
            f"memory-bound {mem:.1f}% / compute-bound {comp:.1f}% / "
            f"unknown {100 - mem - comp:.1f}% of the analysed steps' {where} time"
        )
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"wrote {dest}")
    return "\n".join(lines)

"""torch's own FLOP estimates: the collector's ``*.profiler_flops.json.gz`` (per operator and
input shapes), filled into the ops table where the trace has no ``flops``."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from tracekit.classify.codes import combine_codes
from tracekit.classify.manifest import TraceLike, run_artifact
from tracekit.errors import TraceError


def read_profiler_flops(path: str | Path) -> pd.DataFrame:
    """The collector's ``*.profiler_flops.json.gz``: ``name``, ``input_dims`` (JSON, as the
    trace writes it), ``flops`` per call."""
    p = Path(path)
    try:
        with gzip.open(p, "rt") if p.name.endswith(".gz") else p.open() as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise TraceError(f"{p}: unreadable profiler FLOPs file ({e})") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if doc.get("format") != "tracekit.profiler_flops" or not isinstance(rows, list):
        raise TraceError(f"{p}: not a tracekit.profiler_flops file")
    out = [
        {
            "name": r["name"],
            "input_dims": json.dumps(r["input_shapes"]),
            "flops": float(r["flops"]) / max(1, int(r.get("count", 1))),
        }
        for r in rows
        if isinstance(r, dict) and r.get("flops")
    ]
    return cast(pd.DataFrame, pd.DataFrame(out, columns=["name", "input_dims", "flops"]))


def run_profiler_flops(trace: TraceLike) -> pd.DataFrame | None:
    p = run_artifact(trace, "profiler_flops")
    return read_profiler_flops(p) if p is not None else None


def with_profiler_flops(
    ops: pd.DataFrame, table: pd.DataFrame | str | Path, notes: list[str]
) -> pd.DataFrame:
    """``ops`` with the profiler's per-call FLOPs filled in by (name, input shapes)."""
    t = read_profiler_flops(table) if isinstance(table, (str, Path)) else table
    if not len(t):
        return ops

    def norm(s: Any) -> str | None:
        try:
            return json.dumps(json.loads(s)) if isinstance(s, str) else None
        except ValueError:
            return None

    lookup = {
        (n, norm(d)): f for n, d, f in zip(t["name"], t["input_dims"], t["flops"], strict=True)
    }
    # looked up once per distinct (name, input dims): half a million ops have a few hundred
    n_codes, n_uniq = pd.factorize(ops["name"].astype(str))
    d_codes, d_uniq = pd.factorize(ops["input_dims"])
    names = [*n_uniq.tolist(), math.nan]  # code -1: missing
    dims = [*(norm(d) for d in d_uniq), None]
    codes, first = combine_codes(n_codes % len(names), d_codes % len(dims))
    found = np.array(
        [lookup.get((names[n_codes[r]], dims[d_codes[r]]), math.nan) for r in first.tolist()],
        dtype=float,
    )[codes]
    have = (
        pd.to_numeric(ops["flops"], errors="coerce").to_numpy(dtype=float)
        if ("flops" in ops)
        else np.full(len(ops), math.nan)
    )
    fill = ~np.isfinite(have) & np.isfinite(found)
    if fill.any():
        ops = ops.copy()
        ops["flops"] = np.where(fill, found, have)
        notes.append(
            f"torch's own FLOP estimates (profiler_flops) used for {int(fill.sum())} "
            "operators (GEMMs and convolutions)"
        )
    return ops

"""One trace of every rank, for Perfetto (ui.perfetto.dev) or chrome://tracing.

``ranks.trace.json.gz`` is a Chrome trace with one process per rank (``pid`` = rank, named
``rank R``), its CPU threads and GPU streams as threads, every time on the common time
base of the multi-rank analysis (each rank's clock offset applied; zero = the earliest
event). Each rank contributes what its per-rank work kept (``timeline.parquet``: every GPU
activity, the CPU operators at depth 0-1, annotations and collective operators), and every
matched collective adds flow arrows from the rank that arrived last to each rank that
waited for it, with the collective's transfer and wait in the arrow's args.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.io import GZIP_LEVEL, atomic_file
from tracekit.ranks.perrank import GPU_TID
from tracekit.ranks.reduce import RanksSummary

NAME = "ranks.trace.json.gz"


def _meta(pid: int, tid: int, name: str, value: Any, key: str = "name") -> str:
    return json.dumps({"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {key: value}})


def _rank_events(rank: int, tl: pd.DataFrame, shift_ns: int, host: str | None) -> Iterator[str]:
    label = f"rank {rank}" + (f" ({host})" if host else "")
    yield _meta(rank, 0, "process_name", label)
    yield _meta(rank, 0, "process_sort_index", rank, "sort_index")
    tracks = tl.groupby("tid", sort=True)["track"].first()
    for tid, track in zip(tracks.index.tolist(), tracks.tolist(), strict=True):
        yield _meta(rank, int(tid), "thread_name", str(track))
    ts = (tl["ts"].to_numpy(dtype=np.int64) + shift_ns) / 1e3
    dur = tl["dur"].to_numpy(dtype=np.int64) / 1e3
    for t, d, tid, name, cat, cls in zip(
        ts, dur, tl["tid"], tl["name"], tl["cat"], tl["cls"], strict=True
    ):
        args = f', "args": {{"class": {json.dumps(cls)}}}' if cls else ""
        yield (
            f'{{"ph": "X", "pid": {rank}, "tid": {int(tid)}, "ts": {t:.3f}, "dur": {d:.3f}, '
            f'"name": {json.dumps(name)}, "cat": {json.dumps(cat)}{args}}}'
        )


def _flows(s: RanksSummary, zero: int) -> Iterator[str]:
    """An arrow from the last rank's instance of each collective to every other rank's."""
    inst = s.instances
    if not len(inst) or "key" not in inst:
        return
    gpu = inst[inst["on"] == "gpu"]
    flow = 0
    for _, g in gpu.groupby("key", sort=True):
        if len(g) < 2:
            continue
        last = g.loc[g["ts"].idxmax()]
        for r in g.itertuples(index=False):
            if r.rank == last["rank"]:
                continue
            flow += 1
            args = {
                "collective": r.kind,
                "message_bytes": None if r.message_bytes != r.message_bytes else r.message_bytes,
                "transfer_us": int(r.transfer_ns) / 1e3,
                "wait_us": int(r.wait_ns) / 1e3,
            }
            for ph, row in (("s", last), ("f", r._asdict())):
                ev = {
                    "ph": ph, "id": flow, "pid": int(row["rank"]),
                    "tid": GPU_TID + int(row["stream"]), "ts": (int(row["ts"]) - zero) / 1e3,
                    "name": "waited for", "cat": "collective", "args": args,
                }  # fmt: skip
                if ph == "f":
                    ev["bp"] = "e"
                yield json.dumps(ev)


def write_merged(s: RanksSummary, path: Path, hosts: dict[int, str | None] | None = None) -> int:
    """Write the merged trace to ``path`` (gzip, atomically); returns the events written."""
    drawn = set(s.shown or s.dirs)
    frames = {
        r: pd.read_parquet(Path(d) / "timeline.parquet")
        for r, d in sorted(s.dirs.items())
        if r in drawn
    }
    shifts = {r: s.bases.get(r, 0) + s.clock.offsets_ns.get(r, 0) for r in frames}
    starts = [int(tl["ts"].min()) + shifts[r] for r, tl in frames.items() if len(tl)]
    zero = min(starts) if starts else 0
    n = 0
    with atomic_file(Path(path)) as tmp, gzip.open(tmp, "wt", compresslevel=GZIP_LEVEL) as f:
        f.write('{"displayTimeUnit": "ms", "otherData": {"tracekit": "merged ranks: pid = rank, ')
        f.write(f'{json.dumps(s.clock.reason)[1:-1]}"}},\n"traceEvents": [\n')
        first = True
        for r, tl in frames.items():
            for line in _rank_events(r, tl, shifts[r] - zero, (hosts or {}).get(r)):
                f.write(line if first else ",\n" + line)
                first = False
                n += 1
        for line in _flows(s, zero):
            f.write(line if first else ",\n" + line)
            first = False
            n += 1
        f.write("\n]}\n")
    return n

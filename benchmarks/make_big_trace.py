"""Build a large, faithful trace by repeating a real trace's events.

Copy k of every event is shifted by k x (the trace's time span) and every id
that links events (External id, correlation, flow ids, Python ids,
ProfilerStep#N numbers) is shifted so copies never collide: the result parses
like one long profiling session of the same workload.

    python benchmarks/make_big_trace.py fixtures/X.pt.trace.json.gz big.json --mb 508

With ``rank``, the trace is rank ``rank`` of a ``world_size``-rank job: its header gets
Kineto's ``distributedInfo`` and a trace id of its own, and every timestamp is shifted
by ``shift_us`` (the ranks' clock offset); ids stay as they are (each rank's process
numbers its events independently). benchmarks/ranks_bench.py builds its ranks so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = (
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "Record function id",
    "Sequence number",
)


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return json.load(f, parse_float=Decimal)  # type: ignore[no-any-return]


def _fmt(obj: Any) -> str:
    # Decimals (exact timestamps) are written as bare JSON numbers, as Kineto writes them.
    text = json.dumps(obj, default=lambda d: f"__D__{d:f}__D__", separators=(", ", ": "))
    return text.replace('"__D__', "").replace('__D__"', "")


def build(
    src: Path,
    dst: Path,
    target_mb: float,
    *,
    rank: int | None = None,
    world_size: int = 1,
    shift_us: int = 0,
) -> int:
    doc = _load(src)
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
        doc["trace_id"] = f"{doc.get('trace_id', '')}-rank{rank}"
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, Decimal)) and e.get("ph") != "M"]
    t_min = min(e["ts"] for e in timed)
    t_max = max(e["ts"] + e.get("dur", 0) for e in timed)
    span = (t_max - t_min) + 1000
    max_ids = {k: 0 for k in _ID_ARGS}
    max_flow = 0
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    for e in events:
        a = e.get("args") or {}
        for k in _ID_ARGS:
            if isinstance(a.get(k), int):
                max_ids[k] = max(max_ids[k], a[k])
        if isinstance(e.get("id"), int):
            max_flow = max(max_flow, e["id"])

    def copy(e: dict[str, Any], k: int) -> dict[str, Any]:
        c = dict(e)
        if "ts" in c and isinstance(c["ts"], (int, Decimal)):
            c["ts"] = c["ts"] + k * span + shift_us
        if isinstance(c.get("id"), int):
            c["id"] = c["id"] + k * (max_flow + 1)
        m = _STEP.match(str(c.get("name", "")))
        if m and step_span:
            c["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_span}"
        if "args" in c and isinstance(c["args"], dict):
            a = dict(c["args"])
            for key in _ID_ARGS:
                if isinstance(a.get(key), int) and a[key] > 0:
                    a[key] = a[key] + k * (max_ids[key] + 1)
            c["args"] = a
        return c

    head = {k: v for k, v in doc.items()}
    first = [_fmt(copy(e, 0)) for e in events]  # copy 0: the events as they are, shifted
    sized = first if not shift_us else [_fmt(e) for e in events]
    one = sum(len(t) + 4 for t in sized)
    copies = max(1, int(target_mb * 1e6 / one))
    with dst.open("w") as f:
        f.write(_fmt(head)[:-1] + ', "traceEvents": [\n')
        f.write(",\n".join("  " + t for t in first))
        for k in range(1, copies):
            for e in events:
                if e.get("ph") != "M":
                    f.write(",\n  " + _fmt(copy(e, k)))
        f.write("\n]}\n")
    return copies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--mb", type=float, default=508.0, help="approximate size in MB")
    a = p.parse_args()
    n = build(a.src, a.dst, a.mb)
    print(
        f"{a.dst}: {a.dst.stat().st_size / 1e6:.0f} MB, {n} copies of {a.src.name}", file=sys.stderr
    )


if __name__ == "__main__":
    main()

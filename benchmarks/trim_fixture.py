"""Copy a run folder as a test fixture, at most ``--max-mb`` MB.

Keeps ``manifest.json``, the trace, the light timeline pass's trace (and its step-start
sidecar), torch's FLOP table, the memory timeline and the counters CSVs (no snapshot
pickle, report or TensorBoard folder). If the copy is still larger than the limit, the
trace loses, in this order, its ``python_function`` events (``--with-stack`` stacks) and
its ``[memory]`` instant events; the manifest then says so under ``fixture_trimmed``.
Prints the size of each file.

    python benchmarks/trim_fixture.py runs/run-resnet50-b64-bf16 fixtures/h200-run-resnet50-b64-bf16
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from tracekit.manifest import MANIFEST, write_manifest

KEEP = (".pt.trace.json.gz", ".profiler_flops.json.gz", ".memory_timeline.json.gz", ".csv",
        ".timeline.json.gz", ".timeline_steps.json")  # fmt: skip
DROP_ORDER = (
    ("python_function", lambda e: e.get("cat") == "python_function"),
    ("[memory]", lambda e: e.get("name") == "[memory]"),
)


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--max-mb", type=float, default=2.0)
    args = ap.parse_args()
    if args.dest.exists():
        shutil.rmtree(args.dest)
    args.dest.mkdir(parents=True)
    manifest = json.loads((args.run / MANIFEST).read_text())
    man = write_manifest(args.dest / MANIFEST, manifest)  # checked on the way
    if man.artifacts.trace is None:
        raise SystemExit(f"{args.run}/{MANIFEST} names no trace (artifacts.trace)")
    for p in sorted(args.run.iterdir()):
        if p.is_file() and p.name.endswith(KEEP):
            shutil.copy2(p, args.dest / p.name)
    trace = args.dest / man.artifacts.trace
    dropped: list[str] = []
    for label, drop in DROP_ORDER:
        if size(args.dest) <= args.max_mb * 1e6:
            break
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        before = len(doc["traceEvents"])
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not drop(e)]
        trace.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
        dropped.append(f"{before - len(doc['traceEvents'])} {label} events")
    if dropped:
        manifest["fixture_trimmed"] = dropped
        write_manifest(args.dest / MANIFEST, manifest)
    for p in sorted(args.dest.iterdir()):
        print(f"{p.stat().st_size / 1e3:10.1f} kB  {p}")
    total = size(args.dest) / 1e6
    print(f"{total:.2f} MB in all" + (f"; dropped {', '.join(dropped)}" if dropped else ""))
    if total > args.max_mb:
        raise SystemExit(f"still {total:.2f} MB > {args.max_mb} MB: profile fewer steps")


if __name__ == "__main__":
    main()

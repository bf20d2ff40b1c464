"""The multi-rank report with its rank processes forked from the fork server
(``TRACEKIT_RANK_POOL=forkserver``: tracekit/preload.py imported once) against each rank's
process spawned (``spawn``: each imports numpy, pyarrow, pandas and tracekit's stages).
By default (``auto``) tracekit forks where there are more ranks than workers.

    python benchmarks/rank_pool_start.py                       # the 2-rank costed fixture
    python benchmarks/rank_pool_start.py RUN_FOLDER --rounds 5 --workers 2

Each round runs ``tracekit report RUN --no-tensorboard`` once each way, in alternating
order, each in a fresh process. The fork server's processes are not the report's children
once it has exited, so CPU is read machine-wide (``/proc/stat``, Linux): run it on an
otherwise idle machine. Prints each round and the medians of wall time, CPU and the
per-round ratios (spawn / fork server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "fixtures" / "h100x2-ddp-gpt2s-b8-s128-fp32-costed"


def busy_s() -> float:
    """CPU seconds the machine has spent busy (all cores; /proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def one(way: str, run: Path, workers: int) -> tuple[float, float]:
    """(wall s, machine CPU s) of one report."""
    with tempfile.TemporaryDirectory() as d:
        args = [str(run), "-o", str(Path(d) / "rep"), "--no-tensorboard", "--workers", str(workers)]
        b, t = busy_s(), time.perf_counter()
        env = {**os.environ, "TRACEKIT_RANK_POOL": way}
        cmd = [sys.executable, "-m", "tracekit.cli", "report", *args]
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        wall = time.perf_counter() - t
        time.sleep(0.5)  # the fork server ends after the report: count its CPU too
        return wall, busy_s() - b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, nargs="?", default=RUN)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    got: dict[str, list[tuple[float, float]]] = {"forkserver": [], "spawn": []}
    for i in range(a.rounds):  # alternating order: ABBA...
        ways = ["forkserver", "spawn"] if i % 2 == 0 else ["spawn", "forkserver"]
        for way in ways:
            got[way].append(one(way, a.run, a.workers))
        f, s = got["forkserver"][-1], got["spawn"][-1]
        print(f"round {i}: fork server {f[0]:.2f} s wall, {f[1]:.1f} CPU-s; "
              f"spawn {s[0]:.2f} s wall, {s[1]:.1f} CPU-s")  # fmt: skip
    med = {k: [statistics.median(x) for x in zip(*v, strict=True)] for k, v in got.items()}
    cpu = statistics.median(
        s[1] / f[1] for f, s in zip(got["forkserver"], got["spawn"], strict=True)
    )
    wall = statistics.median(
        s[0] / f[0] for f, s in zip(got["forkserver"], got["spawn"], strict=True)
    )
    print(f"{a.run.name}, --workers {a.workers}, {a.rounds} rounds: median wall fork server "
          f"{med['forkserver'][0]:.2f} s, spawn {med['spawn'][0]:.2f} s (ratio {wall:.2f}); "
          f"CPU {med['forkserver'][1]:.1f} against {med['spawn'][1]:.1f} CPU-s "
          f"(ratio spawn/fork server {cpu:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

"""The cross-rank reduce alone, on map results already on disk, for one or more checkouts of
tracekit in alternating rounds: its CPU and wall at each size, per rank, and how flat the
CPU per rank is between the smallest and the largest job.

WORK holds ``job<N>/`` (a job from make_rank_job.py) and ``out<N>/`` (its map results), as
``ranks_scale.py --keep WORK`` leaves them. Each run is a process of its own: the reduce
``benchmarks/ranks_scale.py --child reduce`` of that checkout times (imports and discovery
excluded). ``--fixed-ranks K`` also reduces the first K ranks of the smallest job.

    python benchmarks/reduce_ab.py WORK --ranks 64 256 1024 --rounds 5 [--tree OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def reduce_once(tree: Path, work: Path, n: int, first: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(tree / "benchmarks" / "ranks_scale.py"), "--child", "reduce"]
    p = subprocess.run(
        [*cmd, str(work / f"job{n}"), str(work / f"out{n}"), str(first)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{tree}: reduce of {n} ranks failed:\n{p.stderr[-2000:]}")
    got: dict[str, Any] = json.loads(line[7:])
    return got


def table(runs: dict[tuple[str, str], list[dict[str, Any]]], sizes: list[tuple[str, int]]) -> str:
    """Per checkout and size: medians (the rounds' range) of wall, CPU, CPU per rank, RSS."""
    out = ["| checkout | ranks | wall s | CPU s | CPU ms per rank | peak RSS GB |",
           "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (tree, name), rs in runs.items():
        ranks = dict(sizes)[name]
        cpu = [r["reduce_cpu_s"] for r in rs]
        wall = [r["wall_s"] for r in rs]
        out.append(
            f"| {tree} | {name} | {statistics.median(wall):.3f} ({min(wall):.3f}-{max(wall):.3f})"
            f" | {statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | "
            f"{1000 * statistics.median(cpu) / ranks:.2f} | "
            f"{statistics.median(r['peak_rss_gb'] for r in rs):.2f} |"
        )
    return "\n".join(out)


def flatness(runs: dict[tuple[str, str], list[dict[str, Any]]], tree: str, lo: str, hi: str,
             sizes: dict[str, int]) -> str:  # fmt: skip
    """CPU per rank at the smallest job over that at the largest (target: <= 1.5)."""
    per = {
        n: statistics.median(r["reduce_cpu_s"] for r in runs[(tree, n)]) / sizes[n]
        for n in (lo, hi)
    }
    return f"{tree}: CPU per rank at {lo} ranks / at {hi} ranks = {per[lo] / per[hi]:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fixed-ranks", type=int, default=8)
    ap.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    a = ap.parse_args(argv)
    trees = {"this": ROOT, **{str(t): t.resolve() for t in a.tree}}
    small = min(a.ranks)
    sizes = [(f"first{a.fixed_ranks}", a.fixed_ranks)] + [(str(n), n) for n in sorted(a.ranks)]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {
        (t, name): [] for t in trees for name, _ in sizes
    }
    for _ in range(a.rounds):
        for name, n in sizes:
            for t, path in trees.items():  # alternating: each size, every checkout in turn
                first = n if name.startswith("first") else 0
                runs[(t, name)].append(reduce_once(path, a.work, small if first else n, first))
    print(table(runs, sizes))
    lo, hi = str(small), str(max(a.ranks))
    for t in trees:
        print(flatness(runs, t, lo, hi, dict(sizes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

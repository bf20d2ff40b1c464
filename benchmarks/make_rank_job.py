"""Write a many-rank DDP job built from the real 2 x H100 DDP rank traces, with injected
faults (benchmarks/rankjob.py says how it is built):

    python benchmarks/make_rank_job.py OUT --ranks 1024                 # 128 nodes of 8
    python benchmarks/make_rank_job.py OUT --ranks 64 --no-missing --straggler 5
    python benchmarks/make_rank_job.py OUT --ranks 8 --size large --steps 20

Faults are placed on different nodes by ``--seed`` unless a rank (a node for
``--slow-node``) is given; ``--no-<fault>`` leaves one out. The truth is written beside the
folder, ``OUT.faults.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rankjob as R

FAULTS = ("straggler", "slow_node", "stall", "truncated", "missing")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--size", choices=R.SIZES, default="small")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jitter-pct", type=float, default=0.5)
    ap.add_argument("--straggler-pct", type=float, default=15.0)
    ap.add_argument("--slow-factor", type=float, default=2.0)
    ap.add_argument("--stall-pct", type=float, default=20.0)
    for f in FAULTS:
        ap.add_argument(f"--{f.replace('_', '-')}", type=int, default=-1, metavar="N")
        ap.add_argument(f"--no-{f.replace('_', '-')}", action="store_true")
    a = ap.parse_args(argv)
    faults = {f: None if getattr(a, f"no_{f}") else getattr(a, f) for f in FAULTS}
    spec = R.Spec(
        ranks=a.ranks, per_node=a.per_node, steps=a.steps, size=a.size, seed=a.seed,
        jitter_pct=a.jitter_pct, straggler_pct=a.straggler_pct, slow_factor=a.slow_factor,
        stall_pct=a.stall_pct, **faults,
    )  # fmt: skip
    t = time.perf_counter()
    job = R.build(a.out, spec)
    size = sum(p.stat().st_size for p in Path(a.out).iterdir())
    print(
        f"{len(job.files)} rank traces ({size / 1e6:.1f} MB) in {a.out} in "
        f"{time.perf_counter() - t:.1f} s; faults: straggler {job.straggler}, slow node "
        f"{job.slow_node} (ranks {job.slow_node_ranks[:1]}..{job.slow_node_ranks[-1:]}), "
        f"input stall {job.stall}, truncated {job.truncated}, missing {job.missing}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a tracekit process costs after its work is done: the interpreter's exit, with and
without :func:`tracekit.io.freeze_before_exit`.

    python benchmarks/exit_cost.py                 # a CPU collect (tiny preset)
    python benchmarks/exit_cost.py --what rank     # a per-rank analysis (pandas, pyarrow)
    python benchmarks/exit_cost.py --rounds 7 --device cuda

Each round runs the same child twice, in alternating order: ``tracekit collect`` (or the
per-rank analysis of a fixture's rank-0 trace) called in the child, which then writes its
CPU time so far and exits, plainly or after ``freeze_before_exit()`` (what tracekit's entry
points do). The exit's cost is the child's whole CPU time (user + system, from the
parent's ``getrusage``) less what it wrote; the ratio printed is the median of the
per-round ratios (plain / frozen).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK0 = next((ROOT / "fixtures" / "h100x2-ddp-gpt2s-b8-s128-fp32").glob("rank0.*.pt.trace.json.gz"))

CHILD = """\
import json, os, sys
from pathlib import Path
what, device, out, freeze = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4] == "1"
if what == "collect":
    from tracekit.cli import main
    code = main(["collect", "--device", device, "--preset", "tiny", "--batch", "2", "--seq",
                 "16", "--steps", "1", "--warmup", "0", "--profile-wait", "0",
                 "--profile-warmup", "0", "--no-ceilings", "-q", "-o", str(out / "run")])
else:
    from tracekit.ranks import perrank
    perrank.analyse(Path({rank0!r}), out / "rank0")
    code = 0
if freeze:
    from tracekit.io import freeze_before_exit
    freeze_before_exit()
t = os.times()
(out / "cpu.json").write_text(json.dumps(t.user + t.system))
sys.exit(code)
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def exit_cpu(what: str, device: str, freeze: bool) -> float:
    """CPU seconds the child spent after writing its CPU time: its exit."""
    with tempfile.TemporaryDirectory() as d:
        before = _children_cpu()
        code = CHILD.format(rank0=str(RANK0))
        args = [sys.executable, "-c", code, what, device, d, "1" if freeze else "0"]
        subprocess.run(args, check=True, capture_output=True)
        total = _children_cpu() - before
        return total - float(json.loads((Path(d) / "cpu.json").read_text()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", choices=("collect", "rank"), default="collect")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    plain: list[float] = []
    frozen: list[float] = []
    ratios = []
    for i in range(a.rounds):  # alternating order: ABBA...
        order = [(False, plain), (True, frozen)]
        for freeze, acc in order if i % 2 == 0 else order[::-1]:
            acc.append(exit_cpu(a.what, a.device, freeze))
        ratios.append(plain[-1] / max(frozen[-1], 1e-3))
        print(f"round {i}: exit CPU plain {plain[-1]:.2f} s, frozen {frozen[-1]:.2f} s")
    print(
        f"{a.what} ({a.device}), {a.rounds} rounds: exit CPU median plain "
        f"{statistics.median(plain):.2f} s, frozen {statistics.median(frozen):.2f} s; "
        f"paired ratio plain/frozen {statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()

"""Time `tracekit report` stage by stage on one trace (e.g. one from make_big_trace.py).

    python benchmarks/make_big_trace.py fixtures/h200-gpt2s-b8-s128-fp32-naive/*.pt.trace.json.gz \\
        /tmp/big.pt.trace.json --mb 508
    python benchmarks/report_speed.py /tmp/big.pt.trace.json [--tensorboard]

Prints the wall time of each stage (parse, classify, summarize, plots, write, tensorboard,
waiting for the profiler-plugin copy), the total including imports, and the peak RSS.
Outputs go to a temporary folder that is removed afterwards.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard events and the torch-tb-profiler copy",
    )
    a = p.parse_args()
    from tracekit.reports import report

    imported = time.perf_counter() - T0
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        res = report(a.trace, tmp / "report", tensorboard=tmp / "tb" if a.tensorboard else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = a.trace.stat().st_size / 1e6
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in res.timings.items() if k != "total")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux -> GB
    print(
        f"{a.trace.name} ({size:.1f} MB): imports {imported:.2f} s, {stages}; "
        f"total {time.perf_counter() - T0:.2f} s wall, peak RSS {rss:.2f} GB",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

"""Time `tracekit report` stage by stage on one trace (e.g. one from make_big_trace.py).

    python benchmarks/make_big_trace.py fixtures/h200-gpt2s-b8-s128-fp32-naive/*.pt.trace.json.gz \\
        /tmp/big.pt.trace.json --mb 508
    python benchmarks/report_speed.py /tmp/big.pt.trace.json [--tensorboard]
    tracekit parse /tmp/big.pt.trace.json -o /tmp/big-tables   # once, then iterate on
    python benchmarks/report_speed.py /tmp/big-tables          # the stages after parse

Prints the wall time of each stage (parse — for a folder from ``tracekit parse`` just
reading its Parquet tables —, classify, summarize, plots (with a plot worker: the wait for
it), write, tensorboard, waiting for the profiler-plugin copy, and the terminal tables;
then the critical path's share of summarize),
the total including imports, the CPU time and the peak RSS; then the CPU seconds this
process spent in the main stages (on a machine shared with other work they vary less than
wall times; a plot worker's CPU is not in them). Outputs go to a temporary folder that is
removed afterwards. This checkout's tracekit is measured, whichever tracekit is installed,
with its process tuned as `tracekit report` tunes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]


def _this_checkout() -> None:
    """Import tracekit and tracekit.reports from this checkout (an editable install of
    another checkout maps ``tracekit.reports`` to its own folder: see conftest.py), the
    process tuned as `tracekit report` tunes it."""
    sys.path.insert(0, str(ROOT))
    import tracekit
    from tracekit import cli

    if hasattr(cli, "dedicate_process"):  # what the command does first (older: nothing)
        cli.dedicate_process()  # before pandas and pyarrow are imported
    spec = importlib.util.spec_from_file_location(
        "tracekit.reports", ROOT / "reports" / "__init__.py",
        submodule_search_locations=[str(ROOT / "reports")],
    )  # fmt: skip
    assert spec is not None and spec.loader is not None
    sys.modules["tracekit.reports"] = mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tracekit.reports = mod  # type: ignore[attr-defined]
    assert Path(tracekit.__file__).resolve().parent == ROOT / "tracekit"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path, help="trace file, run folder or parsed folder")
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard events and the torch-tb-profiler copy",
    )
    a = p.parse_args()
    _this_checkout()
    from rich.console import Console

    import tracekit.analyse as pipeline  # the stages; reports.render writes the outputs
    import tracekit.reports.render as stages
    from tracekit.commands.report import report
    from tracekit.reports import terminal

    cpu: dict[str, float] = {}
    for name in ("load", "trace_facts", "classify_trace", "summarize", "write_outputs"):
        for mod in (pipeline, stages):
            if hasattr(mod, name):  # (an older checkout has no trace_facts)
                setattr(mod, name, _cpu_timed(getattr(mod, name), name, cpu))
    wall: dict[str, float] = {}
    cp_mod = sys.modules.get("tracekit.summary.critical_path")
    if cp_mod is not None and hasattr(cp_mod, "for_report"):  # part of summarize
        cp_mod.for_report = _cpu_timed(cp_mod.for_report, "critical_path", cpu, wall)
    imported = time.perf_counter() - T0
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        res = report(a.trace, tmp / "report", tensorboard=tmp / "tb" if a.tensorboard else None)
        t = time.perf_counter()
        terminal.render(res.summary, Console(file=io.StringIO(), width=80), res.describe())
        res.timings["terminal"] = time.perf_counter() - t
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = f"{a.trace.stat().st_size / 1e6:.1f} MB" if a.trace.is_file() else "folder"
    done = ", ".join(f"{k} {v:.2f} s" for k, v in res.timings.items() if k != "total")
    after = sum(v for k, v in res.timings.items() if k not in ("total", "parse"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux -> GB
    total_cpu = sum(os.times()[:2])
    print(
        f"{a.trace.name} ({size}): imports {imported:.2f} s, {done}; after parse "
        f"{after:.2f} s; total {time.perf_counter() - T0:.2f} s wall, {total_cpu:.2f} s CPU "
        f"(this process), peak RSS {rss:.2f} GB; load average {os.getloadavg()[0]:.2f}",
        file=sys.stderr,
    )
    print("CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()), file=sys.stderr)
    if wall:
        print(
            "inside summarize: " + ", ".join(f"{k} {v:.2f} s" for k, v in wall.items()),
            file=sys.stderr,
        )


def _cpu_timed(
    f: Any, name: str, into: dict[str, float], wall: dict[str, float] | None = None
) -> Any:
    """``f``, adding the CPU seconds of this process it took to ``into[name]`` (and its
    wall seconds to ``wall[name]``)."""

    def timed(*args: Any, **kw: Any) -> Any:
        t, w = time.process_time(), time.perf_counter()
        try:
            return f(*args, **kw)
        finally:
            into[name] = into.get(name, 0.0) + time.process_time() - t
            if wall is not None:
                wall[name] = wall.get(name, 0.0) + time.perf_counter() - w

    return timed


if __name__ == "__main__":
    main()

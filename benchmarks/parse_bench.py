"""Benchmark `tracekit parse` against json.load + pandas and HolisticTraceAnalysis.

Builds a big trace by repeating a real trace (benchmarks/make_big_trace.py), then
runs each contender as its own subprocess on the same file and reports wall time,
the ratio to tracekit and peak memory:

* peak RSS: the largest single process (getrusage of the waited child, Linux KB);
* peak tree PSS: the largest sampled sum of PSS over the process and its children
  (every 50 ms from /proc/*/smaps_rollup), which counts tracekit's worker processes
  too and does not double-count pages they share with their parent.

    python benchmarks/parse_bench.py                     # largest fixture, 508 MB
    python benchmarks/parse_bench.py --src X.json.gz --mb 508 --hta-python /venv/bin/python

HTA is run only if its package imports in the chosen interpreter (default: this one).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    name: str
    wall: float | None
    rss_mb: float | None
    tree_pss_mb: float | None
    note: str = ""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak of the summed PSS of a process and its descendants."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            todo, total = [self.pid], 0
            while todo:
                p = todo.pop()
                total += _pss_kb(p)
                todo += _children(p)
            self.peak_kb = max(self.peak_kb, total)
            self.stop.wait(0.05)


def run(name: str, cmd: list[str], env: dict[str, str] | None = None) -> Result:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = TreeSampler(proc.pid)
    if Path("/proc/self/smaps_rollup").exists():
        sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    out = (proc.stdout.read() if proc.stdout else b"").decode(errors="replace")
    err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    tree = sampler.peak_kb / 1024 if sampler.peak_kb else None
    if rc != 0:
        tail = (err.strip().splitlines() or ["?"])[-1][:120]
        return Result(name, None, usage.ru_maxrss / 1024, tree, f"failed (exit {rc}): {tail}")
    return Result(
        name,
        wall,
        usage.ru_maxrss / 1024,
        tree,
        out.strip().splitlines()[-1][:100] if out.strip() else "",
    )


def default_src() -> Path | None:
    found = sorted((ROOT / "fixtures").glob("*/*.pt.trace.json.gz"), key=lambda p: p.stat().st_size)
    return found[-1] if found else None


def _make_big() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_big_trace", ROOT / "benchmarks" / "make_big_trace.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _has_hta(python: str) -> bool:
    r = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return r.returncode == 0


JSON_PANDAS = (
    "import json, sys, pandas; d = json.load(open(sys.argv[1])); "
    "df = pandas.DataFrame(d['traceEvents']); print(len(df), 'rows')"
)
HTA = (
    "import sys; from hta.trace_analysis import TraceAnalysis; "
    "a = TraceAnalysis(trace_dir=sys.argv[1]); "
    "print(sum(len(t) for t in a.t.traces.values()) if hasattr(a.t, 'traces') else 'ok')"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--src",
        type=Path,
        default=None,
        help="real trace to repeat (default: the largest file in fixtures/)",
    )
    p.add_argument("--mb", type=float, default=508.0, help="size of the big trace in MB")
    p.add_argument(
        "--big",
        type=Path,
        default=None,
        help="use (or keep) the big trace at this path instead of a temp file",
    )
    p.add_argument(
        "--hta-python",
        default=sys.executable,
        help="interpreter with HolisticTraceAnalysis installed",
    )
    p.add_argument("--skip", action="append", default=[], choices=["json", "hta"])
    a = p.parse_args()

    src = a.src or default_src()
    if src is None or not src.is_file():
        sys.exit("parse_bench: no fixture found; pass --src PATH (a .json or .json.gz trace)")
    work = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        big = a.big or work / "big.pt.trace.json"
        if not big.is_file():
            t = time.perf_counter()
            copies = _make_big().build(src, big, a.mb)
            print(
                f"built {big} ({big.stat().st_size / 1e6:.0f} MB, {copies} copies of "
                f"{src.name}) in {time.perf_counter() - t:.0f} s",
                file=sys.stderr,
            )
        size_mb = big.stat().st_size / 1e6
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        results = [
            run(
                "tracekit parse",
                [sys.executable, "-m", "tracekit.cli", "parse", str(big), "-o", str(work / "out")],
                env,
            )
        ]
        if "json" not in a.skip:
            results.append(
                run("json.load + pandas.DataFrame", [sys.executable, "-c", JSON_PANDAS, str(big)])
            )
        if "hta" not in a.skip:
            if _has_hta(a.hta_python):
                hta_dir = work / "hta"
                hta_dir.mkdir()
                os.symlink(big.resolve(), hta_dir / "rank0.json")
                results.append(
                    run("HTA TraceAnalysis (load)", [a.hta_python, "-c", HTA, str(hta_dir)])
                )
            else:
                results.append(
                    Result(
                        "HTA TraceAnalysis (load)",
                        None,
                        None,
                        None,
                        f"not installed for {a.hta_python}",
                    )
                )
    finally:
        if a.big is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "out", ignore_errors=True)
            shutil.rmtree(work / "hta", ignore_errors=True)

    base = results[0].wall
    print(f"\n{size_mb:.0f} MB trace ({src.name} repeated), {os.cpu_count()} CPUs\n")
    print(f"{'':32} {'wall s':>8} {'x tracekit':>10} {'peak RSS MB':>12} {'tree PSS MB':>12}")
    for r in results:
        wall = f"{r.wall:8.2f}" if r.wall is not None else f"{'-':>8}"
        ratio = f"{r.wall / base:10.1f}" if r.wall is not None and base else f"{'-':>10}"
        rss = f"{r.rss_mb:12.0f}" if r.rss_mb is not None else f"{'-':>12}"
        pss = f"{r.tree_pss_mb:12.0f}" if r.tree_pss_mb is not None else f"{'-':>12}"
        print(f"{r.name:32} {wall} {ratio} {rss} {pss}  {r.note}")


if __name__ == "__main__":
    main()

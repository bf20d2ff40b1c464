"""Analyse N big rank traces with tracekit.ranks.map_ranks, against N x the single trace.

    python benchmarks/ranks_bench.py                       # 8 ranks x ~500 MB (~4 GB in /tmp)
    python benchmarks/ranks_bench.py --ranks 2 --mb 50     # a quick check

Builds N rank traces "faithfully from a fixture" (benchmarks/make_big_trace.py: rank R is
the fixture repeated to ~MB megabytes, with Kineto's distributedInfo {rank R, world N}, a
trace id of its own and its timestamps shifted by R ms), then times, each in its own
process so that its peak RSS is its own:

1. the baseline: the single-trace path N times, one after the other — a process per trace
   tuned as `tracekit report` tunes its own, running the same per-rank function
   (tracekit.ranks.onerank.analyse_rank: parse, classify, summarize; its parse threads one
   per core);
2. map_ranks on the local pool (default workers), its parent's peak RSS and each worker's;
3. map_ranks again: every rank cached;
4. map_ranks on a Dask LocalCluster (processes, one thread each, as many workers as 2.).

It prints wall times, the ratios to the baseline, peak RSS, the per-worker throughput
(trace MB per second of a rank's task) and the size of a rank's results, checks that every
mode wrote the same summary.json per rank, then removes everything it built (--keep DIR
keeps it there). The machine's load average is printed before and after: on a shared
machine, compare runs only at similar loads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "h200-gpt2s-b8-s128-fp32-naive"
FN = "tracekit.ranks.onerank:analyse_rank"


def _this_checkout() -> None:
    sys.path.insert(0, str(ROOT))
    import tracekit

    assert Path(tracekit.__file__).resolve().parent == ROOT / "tracekit"


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _build_one(args: tuple[Path, Path, float, int, int]) -> Path:
    src, dst, mb, rank, world = args
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_big_trace

    make_big_trace.build(src, dst, mb, rank=rank, world_size=world, shift_us=1000 * rank)
    return dst


def build_ranks(src: Path, folder: Path, n: int, mb: float) -> dict[int, Path]:
    """Rank traces named as `tracekit collect --gpus N` names them (plain JSON here); those
    already in ``folder`` (a --keep folder) are used again."""
    jobs = [
        (src, folder / f"rank{r}.bench_{1000 + r}.{17 * 10**17 + r}.pt.trace.json", mb, r, n)
        for r in range(n)
    ]
    todo = [j for j in jobs if not j[1].is_file()]
    with ProcessPoolExecutor(max_workers=min(n, os.cpu_count() or 1)) as pool:
        list(pool.map(_build_one, todo))
    return {j[3]: j[1] for j in jobs}


# ---------------------------------------------------------------- modes (child processes)


def mode_one(trace: Path, out: Path) -> dict[str, Any]:
    """The single-trace path: this process tuned as the CLI tunes it, one analyse_rank."""
    from tracekit.cli import dedicate_process

    dedicate_process()  # before pyarrow and numpy are imported
    from tracekit.io import atomic_dir
    from tracekit.ranks.onerank import analyse_rank

    t0 = time.perf_counter()
    with atomic_dir(out) as tmp:
        analyse_rank(trace, tmp)
    return {"wall_s": time.perf_counter() - t0, "peak_rss_bytes": _rss()}


def mode_engine(
    traces: dict[int, Path], out: Path, dask_workers: int, force: bool
) -> dict[str, Any]:
    import logging

    from tracekit.ranks import default_workers, map_ranks

    cluster: Any = None
    t0 = time.perf_counter()
    if dask_workers:
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=dask_workers, threads_per_worker=1, processes=True,
            dashboard_address=None, silence_logs=logging.ERROR,
        )  # fmt: skip
    started = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        res = map_ranks(
            FN, traces, out, force=force, scheduler=cluster.scheduler_address if cluster else None
        )
    finally:
        if cluster is not None:
            cluster.close()
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "workers": dask_workers or default_workers(list(traces.values())),
        "cluster_start_s": started,
        "parent_peak_rss_bytes": _rss(),
        "ranks": [
            {
                "rank": r.rank, "wall_s": r.wall_s, "cpu_s": r.cpu_s,
                "peak_rss_bytes": r.peak_rss_bytes,
                "worker": r.worker, "cached": r.cached, "trace_bytes": r.trace_bytes,
                "out_bytes": r.out_bytes,
            }
            for r in res
        ],
    }  # fmt: skip


def _child(argv: list[str]) -> dict[str, Any]:
    """Run this script in a mode, in a new process; its JSON answer, with ``cpu_s``: the CPU
    seconds of that process and of every process it started (workers included)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv]
    with tempfile.TemporaryFile("w+") as f:
        proc = subprocess.Popen(cmd, stdout=f, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"{' '.join(argv)}: exit code {proc.returncode}")
        f.seek(0)
        res: dict[str, Any] = json.loads(f.read().strip().splitlines()[-1])
    res["cpu_s"] = usage.ru_utime + usage.ru_stime
    return res


# ---------------------------------------------------------------- the benchmark


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _summaries(folder: Path, n: int) -> list[Any]:
    return [json.loads((folder / f"rank{r}" / "summary.json").read_text()) for r in range(n)]


def _engine_line(label: str, res: dict[str, Any], base: float, base_cpu: float) -> None:
    ranks = res["ranks"]
    procs = len({r["worker"] for r in ranks})
    peak = max(r["peak_rss_bytes"] for r in ranks)
    print(
        f"{label}: wall {res['wall_s']:.1f} s, baseline / this = {base / res['wall_s']:.2f}; "
        f"CPU {res['cpu_s']:.1f} s ({res['cpu_s'] / base_cpu:.2f} x the baseline's); parent "
        f"peak RSS {_gb(res['parent_peak_rss_bytes'])}; {res['workers']} workers at a time, "
        f"{procs} worker processes in all, worker peak RSS max {_gb(peak)}"
    )


def run(n: int, mb: float, src: Path, work: Path, dask: bool) -> None:
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {cores} cores, load average {_load()}; building {n} ranks x ~{mb:.0f} MB")
    t0 = time.perf_counter()
    traces = build_ranks(src, work, n, mb)
    size = sum(p.stat().st_size for p in traces.values())
    print(
        f"built {n} rank traces from {src.name} in {time.perf_counter() - t0:.0f} s: "
        f"{_gb(size)} in all, {size / n / 1e6:.0f} MB each"
    )
    # 1. baseline: the single-trace path, serially
    base_rss, base_cpu = [], 0.0
    t0 = time.perf_counter()
    for r, p in traces.items():
        one = _child(["--one", str(p), str(work / "single" / f"rank{r}")])
        base_rss.append(one["peak_rss_bytes"])
        base_cpu += one["cpu_s"]
    base_wall = time.perf_counter() - t0
    print(
        f"baseline, {n} x the single trace (serial, a process each): wall {base_wall:.1f} s, "
        f"CPU {base_cpu:.1f} s; peak RSS max {_gb(max(base_rss))}"
    )
    # 2. and 3. the local pool, then cached
    args = ["--engine", str(work), "--ranks", str(n)]
    local = _child([*args, "--out", str(work / "local"), "--force"])
    _engine_line("map_ranks, local pool", local, base_wall, base_cpu)
    again = _child([*args, "--out", str(work / "local")])
    assert all(r["cached"] for r in again["ranks"])
    print(f"map_ranks again, every rank cached: wall {again['wall_s']:.3f} s")
    # 4. Dask LocalCluster, as many single-thread worker processes as the local pool had
    if dask:
        w = local["workers"]
        on_dask = _child([*args, "--out", str(work / "dask"), "--force", "--dask", str(w)])
        _engine_line(
            f"map_ranks, Dask LocalCluster ({w} workers x 1 thread; started in "
            f"{on_dask['cluster_start_s']:.1f} s, not counted)",
            on_dask, base_wall, base_cpu,
        )  # fmt: skip
    # the same results from every mode
    want = _summaries(work / "single", n)
    modes = ["local", "dask"] if dask else ["local"]
    same = all(_summaries(work / m, n) == want for m in modes)
    print(f"summary.json of every rank identical in baseline, {', '.join(modes)}: {same}")
    ranks = local["ranks"]
    wall = statistics.median(r["wall_s"] for r in ranks)
    cpu = statistics.median(r["cpu_s"] for r in ranks)
    mb = statistics.median(r["trace_bytes"] for r in ranks) / 1e6
    out = statistics.median(r["out_bytes"] for r in ranks)
    small = statistics.median(
        sum((work / "local" / f"rank{r}" / f).stat().st_size for f in ("summary.json", "rank.json"))
        for r in range(n)
    )
    print(
        f"per rank (local pool, median): {mb:.0f} MB of trace in {wall:.1f} s wall, {cpu:.1f} "
        f"CPU-s: {mb / wall:.0f} MB/s per worker at this load, {mb / cpu:.0f} MB per CPU-second; "
        f"results {out / 1e6:.1f} MB (tables + summary), of which summary.json + rank.json "
        f"{small / 1e3:.0f} kB"
    )
    print(f"load average after: {_load()}")
    if not same:
        raise SystemExit("the modes' results differ")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--mb", type=float, default=500.0, help="approximate size of each rank trace")
    p.add_argument("--fixture", type=Path, default=None, help="source trace (default: fp32 H200)")
    p.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster run")
    p.add_argument("--keep", type=Path, default=None, help="build and keep everything here")
    # internal: the modes run in child processes
    p.add_argument("--one", nargs=2, type=Path, help=argparse.SUPPRESS)
    p.add_argument("--engine", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dask", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    _this_checkout()
    if a.one:
        print(json.dumps(mode_one(*a.one)))
        return
    if a.engine:
        traces = {int(f.name[4:].split(".")[0]): f for f in a.engine.glob("rank*.pt.trace.json")}
        print(json.dumps(mode_engine(traces, a.out, a.dask, a.force)))
        return
    src = a.fixture or next(FIXTURE.glob("*.pt.trace.json.gz"))
    work = a.keep or Path(tempfile.mkdtemp(prefix="tracekit-ranks-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(a.ranks, a.mb, src, work, not a.no_dask)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

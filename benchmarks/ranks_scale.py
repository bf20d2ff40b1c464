"""The multi-rank analysis at 64, 256 and 1,024 ranks: wall, CPU and memory of the per-rank
map (local pool; Dask: a scheduler and workers started as separate processes on 127.0.0.1)
and of the cross-rank reduce, the reduce's cost per rank, and an extrapolation to 16,384
ranks (a straight line through the measured points, stated as such).

    python benchmarks/ranks_scale.py                       # 64, 256, 1024 ranks; Dask at 64, 256
    python benchmarks/ranks_scale.py --ranks 64 --dask-ranks 64 --report   # + tracekit report
    python benchmarks/ranks_scale.py --keep DIR            # keep the jobs and results in DIR

Each job is built by benchmarks/rankjob.py (small traces, 3 steps, the five faults). Every
measured part runs in a process of its own (``--child``), so its peak RSS is its own; CPU is
the process's and its children's (``getrusage``), and for Dask the scheduler's and workers'
process trees (psutil) as well, split into Dask's own processes and the rank servers. The
local pool and a fresh Dask cluster alternate for ``--rounds`` rounds (medians, their range
in brackets). The reduce is timed alone, on the map's results on disk, every size in turn,
with the reduce of the first ``--fixed-ranks`` ranks of the smallest job: its fixed cost.
``--single N`` also runs the single-trace path on N ranks: ``tracekit report TRACE`` per
trace, and the per-rank function one rank after another in one warm process.
``--report`` also runs ``tracekit report FOLDER --scheduler tcp://127.0.0.1:PORT`` at the
smallest size, as a user would, and checks that the terminal names the five faults.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _this_checkout() -> None:
    """Import this checkout's tracekit (and its reports/collectors) in a child process."""
    sys.path.insert(0, str(ROOT))
    with contextlib.suppress(ImportError):
        import conftest  # noqa: F401  (binds tracekit.reports to this checkout)


def _usage() -> dict[str, float]:
    """This process's CPU with its children's, living (the pool's fork server, with the
    workers it reaped) or reaped, and its peak RSS."""
    import psutil

    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    alive = 0.0
    for q in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            t = q.cpu_times()
            alive += t.user + t.system + t.children_user + t.children_system
    return {
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + alive,
        "peak_rss_gb": me.ru_maxrss * 1024 / 1e9,
    }


# ------------------------------------------------------------------------------ children


def child_map(folder: Path, out: Path, scheduler: str | None, workers: int) -> dict[str, Any]:
    from tracekit.ranks import perrank
    from tracekit.ranks.discover import discover
    from tracekit.ranks.engine import map_ranks

    ranks = discover(folder)
    assert ranks is not None
    damaged: dict[int, str] = {}
    t = time.perf_counter()
    res = map_ranks(
        perrank.analyse, ranks.inputs(), out, scheduler=scheduler, workers=workers,
        version=perrank.VERSION, force=True, on_failure=damaged.__setitem__,
    )  # fmt: skip
    wall = time.perf_counter() - t
    return {
        "wall_s": wall,
        **_usage(),
        "ranks": len(res),
        "damaged": sorted(damaged),
        "task_cpu_s": sum(r.cpu_s for r in res),
        "worker_peak_rss_gb": max(r.peak_rss_bytes for r in res) / 1e9,
        "results_mb": sum(r.out_bytes for r in res) / 1e6,
    }


def child_reduce(folder: Path, out: Path, first: int = 0) -> dict[str, Any]:
    """The reduce alone on the map's results (``first``: only the ranks below it, 0: all)."""
    from tracekit.ranks.discover import discover
    from tracekit.ranks.reduce import reduce

    t = time.perf_counter()
    ranks = discover(folder)
    assert ranks is not None
    keep = [r for r in ranks.ranks if not first or r < first]
    dirs = {r: out / f"rank{r}" for r in keep if (out / f"rank{r}" / "rank.json").is_file()}
    damaged = {r: f"rank {r}: not analysed" for r in keep if r not in dirs}
    t1, c1 = time.perf_counter(), time.process_time()
    s = reduce(
        dirs, world_size=len(keep) if first else ranks.world_size, backend=ranks.backend,
        hosts={r: ranks.traces[r].host for r in dirs}, damaged=damaged,
    )  # fmt: skip
    assert s.job is not None
    return {
        "wall_s": time.perf_counter() - t1,
        "reduce_cpu_s": time.process_time() - c1,
        "discover_s": t1 - t,
        **_usage(),
        "ranks": len(dirs),
        "findings": [f.text for f in s.job.findings],
    }


def child_serial(folder: Path, out: Path, n: int) -> dict[str, Any]:
    """The single-trace analysis of the first ``n`` ranks, one after the other in this one
    process (tuned as ``tracekit report`` tunes its own; imports paid once, before the
    clock starts): the per-rank function the map runs, with no engine around it."""
    from tracekit.cli import dedicate_process

    dedicate_process()
    from tracekit.ranks import perrank
    from tracekit.ranks.discover import discover

    ranks = discover(folder)
    assert ranks is not None
    todo = [(r, p) for r, p in sorted(ranks.inputs().items()) if r != _truncated(folder)][:n]
    perrank.analyse(Path(todo[0][1]), out / "warm")  # first-call costs, as a worker's fork
    t, c = time.perf_counter(), time.process_time()
    for r, trace in todo:
        perrank.analyse(Path(trace), out / f"rank{r}")
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
            "ranks": len(todo), **{k: v for k, v in _usage().items() if k != "cpu_s"}}  # fmt: skip


def _truncated(folder: Path) -> int:
    truth = json.loads(folder.with_name(folder.name + ".faults.json").read_text())
    return int(truth["truncated"])


def run_tracekit(*args: str) -> dict[str, Any]:
    """``tracekit ARGS`` (this checkout's), as a user runs it: wall, CPU (its process
    tree), exit status, output."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import conftest; "
        "from tracekit.cli import run; sys.argv[0] = 'tracekit'; sys.exit(run())"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env, cwd=ROOT)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": time.perf_counter() - t, "cpu_s": cpu, "rc": p.returncode,
            "stdout": p.stdout, "stderr": p.stderr[-2000:]}  # fmt: skip


def run_report(folder: Path, scheduler: str) -> dict[str, Any]:
    """``tracekit report FOLDER --scheduler ADDRESS``."""
    return run_tracekit("report", str(folder), "--scheduler", scheduler)


def _child(argv: list[str]) -> int:
    _this_checkout()
    what, *rest = argv
    if what == "map":
        got = child_map(Path(rest[0]), Path(rest[1]), rest[2] or None, int(rest[3]))
    elif what == "serial":
        got = child_serial(Path(rest[0]), Path(rest[1]), int(rest[2]))
    else:
        got = child_reduce(Path(rest[0]), Path(rest[1]), int(rest[2]))
    print("RESULT " + json.dumps(got))
    return 0


def run_child(*args: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.setdefault("TRACEKIT_RANK_POOL", "forkserver")  # one import, then a fork per rank
    p = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"child {args[0]} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(line[7:])
    return got


# --------------------------------------------------------------------------------- Dask


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """``dask scheduler`` and ``procs`` x ``dask worker --nthreads workers/procs``, each a
    separate process on 127.0.0.1 (as a user starts them: one worker per machine, a thread
    per rank it may run at once); stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, workers: int, log: Path, procs: int = 1) -> None:
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        dask = shutil.which("dask") or "dask"
        port = self.address.rsplit(":", 1)[1]
        sched = [dask, "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"]
        self.procs = [self._start(sched, env)]
        self._wait_scheduler()
        for i in range(procs):
            threads = str(max(1, workers // procs))
            worker = [dask, "worker", self.address, "--nthreads", threads, "--no-dashboard"]
            worker += ["--name", f"w{i}", "--memory-limit", "0"]
            self.procs.append(self._start(worker, env))
        self._wait_workers(procs)

    def _start(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = open(self.log, "ab")  # noqa: SIM115 (the process's, closed with it)
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def _wait_scheduler(self) -> None:
        host, port = self.address[6:].rsplit(":", 1)
        for _ in range(300):
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"dask scheduler did not start: {self.log}")

    def _wait_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as c:
            c.wait_for_workers(n, timeout=60)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far: ``dask`` (the scheduler's, the workers' and their nannies'
        own) and ``rank_servers`` (the rank servers', with the rank processes they forked
        and reaped)."""
        import psutil

        got = {"dask": 0.0, "rank_servers": 0.0}
        for p in self.procs:
            try:
                ps = psutil.Process(p.pid)
                for q in [ps, *ps.children(recursive=True)]:
                    t = q.cpu_times()
                    server = "tracekit.ranks.worker" in " ".join(q.cmdline())
                    own, kids = t.user + t.system, t.children_user + t.children_system
                    got["rank_servers" if server else "dask"] += own + (kids if server else 0)
            except psutil.NoSuchProcess:
                continue
        return got

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------------- main


def build(folder: Path, n: int) -> dict[str, Any]:
    import rankjob as R

    t = time.perf_counter()
    job = R.build(folder, R.Spec(ranks=n, steps=3))
    mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    return {"build_s": time.perf_counter() - t, "traces_mb": mb, "job": job}


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def spread(xs: list[float], fmt: str = "{:.1f}") -> str:
    """``median (min-max)`` of a measurement's rounds."""
    m = fmt.format(median(xs))
    return m if len(xs) < 2 else f"{m} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def map_rounds(n: int, work: Path, dask: bool, report: bool, a: Any) -> dict[str, Any]:
    """The map of job ``n``: local pool, then (``dask``) a fresh Dask cluster, alternating
    for ``a.rounds`` rounds; the reduce's findings checked against the injected faults."""
    folder = work / f"job{n}"
    got: dict[str, Any] = {"ranks": n, "map_local": [], "map_dask": []}
    b = build(folder, n)
    job = b.pop("job")
    got.update(b)
    want = {job.straggler, job.stall, job.truncated, job.missing}
    for _ in range(a.rounds if n <= 256 else a.big_rounds):
        out = str(work / f"out{n}")
        got["map_local"].append(run_child("map", str(folder), out, "", str(a.workers)))
        if not dask:
            continue
        cluster = Cluster(a.workers, work / f"dask{n}.log", a.dask_procs)
        try:
            before = cluster.cpu_s()
            d = run_child("map", str(folder), str(work / f"dask{n}"), cluster.address,
                          str(a.workers))  # fmt: skip
            after = cluster.cpu_s()
            d["cluster_cpu_s"] = {k: after[k] - before[k] for k in after}
            got["map_dask"].append(d)
            if report and "report_dask" not in got:
                r = run_report(folder, cluster.address)
                text = r.pop("stdout")
                r["faults_in_terminal"] = all(f"rank {x}" in text for x in want)
                got["report_dask"] = r
        finally:
            cluster.close()
    red = run_child("reduce", str(folder), str(work / f"out{n}"), "0")
    named = " ".join(red["findings"])
    got["faults_named"] = all(f"rank {r}" in named for r in want) and (
        f"node {job.hosts[job.slow_node]}" in named
    )
    got["findings"] = len(red["findings"])
    return got


def reduce_rounds(rows: list[dict[str, Any]], work: Path, a: Any) -> dict[str, Any]:
    """The reduce alone, every size in turn (and the first ``a.fixed_ranks`` ranks of the
    smallest job: the fixed cost), for ``a.rounds`` rounds."""
    small = min(g["ranks"] for g in rows)
    sizes = [(f"first{a.fixed_ranks}", small, a.fixed_ranks)] + [
        (str(g["ranks"]), g["ranks"], 0) for g in rows
    ]
    got: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sizes}
    for _ in range(a.rounds):
        for name, n, first in sizes:
            r = run_child("reduce", str(work / f"job{n}"), str(work / f"out{n}"), str(first))
            r.pop("findings")
            got[name].append(r)
    return got


def single_rounds(n: int, work: Path, a: Any) -> dict[str, Any]:
    """The single-trace path on ``a.single`` ranks of job ``n``: ``tracekit report TRACE``
    per trace (a process each, as a user runs it) and the per-rank function one rank after
    another in one warm process, alternating for ``a.rounds`` rounds."""
    folder = work / f"job{n}"
    ranks = {int(p.name.split(".")[0][4:]): p for p in folder.glob("rank*.pt.trace.json*")}
    traces = [ranks[r] for r in sorted(ranks) if r != _truncated(folder)]
    got: dict[str, Any] = {"ranks": a.single, "report": [], "serial": []}
    for i in range(a.rounds):
        reps = [run_tracekit("report", str(t), "-o", str(work / f"single{i}.{t.name}"))
                for t in traces[: a.single]]  # fmt: skip
        if any(r["rc"] for r in reps):
            raise SystemExit(f"tracekit report failed: {reps[0]['stderr']}")
        got["report"].append({k: sum(r[k] for r in reps) for k in ("wall_s", "cpu_s")})
        got["serial"].append(run_child("serial", str(folder), str(work / f"serial{i}"),
                                       str(a.single)))  # fmt: skip
    return got


def dask_cpu(d: dict[str, Any]) -> float:
    """The whole Dask map's CPU: the client's process and the cluster's processes."""
    return float(d["cpu_s"] + sum(d["cluster_cpu_s"].values()))


def summary_lines(rows: list[dict[str, Any]], red: dict[str, Any]) -> list[str]:
    """The map and reduce table (medians of the rounds, their range in brackets). The
    reduce's CPU per rank: all of it, and beyond its fixed cost (the reduce of the first
    ``--fixed-ranks`` ranks): ``(CPU(n) - CPU(fixed)) / (n - fixed ranks)``."""
    out = [
        "| ranks | traces | map, local pool: wall / CPU | map, Dask: wall / CPU | Dask / pool "
        "CPU | reduce: wall / CPU / peak RSS | reduce CPU per rank: all / beyond the fixed "
        "| faults named |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    fixed = median([r["reduce_cpu_s"] for r in next(iter(red.values()))])
    for g in rows:
        m, d, r = g["map_local"], g["map_dask"], red[str(g["ranks"])]
        lc = [x["cpu_s"] for x in m]
        dask, ratio = "—", "—"
        if d:
            dc = [dask_cpu(x) for x in d]
            dask = f"{spread([x['wall_s'] for x in d])} s / {spread(dc)} CPU-s"
            ratio = f"{median(dc) / median(lc):.2f}"
        cpu = median([x["reduce_cpu_s"] for x in r])
        n = r[0]["ranks"]
        out.append(
            f"| {g['ranks']} | {g['traces_mb']:.1f} MB | {spread([x['wall_s'] for x in m])} s / "
            f"{spread(lc)} CPU-s | {dask} | {ratio} | "
            f"{spread([x['wall_s'] for x in r], '{:.2f}')} s / "
            f"{spread([x['reduce_cpu_s'] for x in r], '{:.2f}')} CPU-s / "
            f"{median([x['peak_rss_gb'] for x in r]):.2f} GB | {1e3 * cpu / n:.2f} / "
            f"{1e3 * (cpu - fixed) / (n - red_ranks(red)):.2f} ms | "
            f"{'all five' if g['faults_named'] else 'NOT ALL'} |"
        )
    first = next(iter(red))
    out.append(
        f"fixed cost: the reduce of the {first[5:]} first ranks' results: "
        f"{spread([r['wall_s'] for r in red[first]], '{:.3f}')} s wall, "
        f"{spread([r['reduce_cpu_s'] for r in red[first]], '{:.3f}')} CPU-s"
    )
    return out


def red_ranks(red: dict[str, Any]) -> int:
    return int(next(iter(red.values()))[0]["ranks"])


def dask_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Where a Dask map's CPU goes beyond the local pool's (medians of the rounds)."""
    out = []
    for g in rows:
        if not g["map_dask"]:
            continue
        loc, d = g["map_local"], g["map_dask"]
        parts = {
            "client process": median([x["cpu_s"] for x in d]),
            "scheduler + workers + nannies": median([x["cluster_cpu_s"]["dask"] for x in d]),
            "rank servers and their rank processes": median(
                [x["cluster_cpu_s"]["rank_servers"] for x in d]
            ),
            "ranks' own task CPU": median([x["task_cpu_s"] for x in d]),
        }
        pool = {"pool (parent, fork server, workers)": median([x["cpu_s"] for x in loc]),
                "ranks' own task CPU": median([x["task_cpu_s"] for x in loc])}  # fmt: skip
        out.append(
            f"{g['ranks']} ranks: Dask "
            + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
            + " CPU-s; local "
            + ", ".join(f"{k} {v:.1f}" for k, v in pool.items())
            + " CPU-s"
        )
    return out


def single_lines(single: dict[str, Any], rows: list[dict[str, Any]], workers: int) -> list[str]:
    """Map throughput per worker against the single-trace path (CPU and wall per rank)."""
    n = single["ranks"]
    g = min(rows, key=lambda x: x["ranks"])
    done = g["map_local"][0]["ranks"]
    per = {
        f"`tracekit report TRACE`, a process per trace ({n})": (
            [x["wall_s"] / n for x in single["report"]],
            [x["cpu_s"] / n for x in single["report"]],
        ),
        f"the per-rank function, {n} ranks in one warm process": (
            [x["wall_s"] / n for x in single["serial"]],
            [x["cpu_s"] / n for x in single["serial"]],
        ),
        f"map, local pool, {workers} workers ({done} ranks; wall x workers)": (
            [x["wall_s"] * workers / done for x in g["map_local"]],
            [x["cpu_s"] / done for x in g["map_local"]],
        ),
    }
    return [f"{k}: {spread([1e3 * v for v in w], '{:.0f}')} ms wall, "
            f"{spread([1e3 * v for v in c], '{:.0f}')} CPU-ms per rank"
            for k, (w, c) in per.items()]  # fmt: skip


def extrapolate(red: dict[str, Any], target: int = 16_384) -> str:
    """A least-squares line through (ranks, reduce wall / CPU / RSS medians), at ``target``."""
    import numpy as np

    x = np.array([v[0]["ranks"] for v in red.values()], dtype=float)
    parts = []
    for key, unit in (("wall_s", "s wall"), ("reduce_cpu_s", "CPU-s"), ("peak_rss_gb", "GB")):
        y = np.array([median([r[key] for r in v]) for v in red.values()], dtype=float)
        slope, icpt = np.polyfit(x, y, 1) if len(x) > 1 else (y[0] / x[0], 0.0)
        parts.append(f"{icpt + slope * target:.1f} {unit} ({1e3 * slope:.2f} m{unit} per rank, "
                     f"{icpt:.2f} fixed)")  # fmt: skip
    return (
        f"extrapolated (a straight line through the {len(x)} measured sizes, not measured): "
        f"the reduce at {target:,} ranks: " + ", ".join(parts)
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--dask-ranks", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dask-procs", type=int, default=1, help="dask worker processes "
                    "(threads: --workers in all)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    ap.add_argument("--big-rounds", type=int, default=1, help="rounds of the maps of more "
                    "than 256 ranks (minutes each)")  # fmt: skip
    ap.add_argument("--fixed-ranks", type=int, default=8, help="the reduce's fixed cost: "
                    "the reduce of this many ranks of the smallest job")  # fmt: skip
    ap.add_argument("--single", type=int, default=0, help="also the single-trace path on "
                    "this many ranks of the smallest job")  # fmt: skip
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    work = Path(a.keep or tempfile.mkdtemp(prefix="ranks_scale."))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for i, n in enumerate(sorted(a.ranks)):
            rows.append(map_rounds(n, work, n in a.dask_ranks, a.report and i == 0, a))
            print(json.dumps(rows[-1]), flush=True)
        red = reduce_rounds(rows, work, a)
        print(json.dumps({"reduce": red}), flush=True)
        single = single_rounds(min(a.ranks), work, a) if a.single else None
        print(json.dumps({"single": single}), flush=True)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary_lines(rows, red) + dask_lines(rows)))
    if single:
        print("\n".join(single_lines(single, rows, a.workers)))
    print(extrapolate(red))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "reduce": red, "single": single}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
process trees (psutil) as well. The reduce is timed alone, on the map's results on disk.
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


def child_reduce(folder: Path, out: Path) -> dict[str, Any]:
    from tracekit.ranks.discover import discover
    from tracekit.ranks.reduce import reduce

    t = time.perf_counter()
    ranks = discover(folder)
    assert ranks is not None
    dirs = {r: out / f"rank{r}" for r in ranks.ranks if (out / f"rank{r}" / "rank.json").is_file()}
    damaged = {r: f"rank {r}: not analysed" for r in ranks.ranks if r not in dirs}
    t1 = time.perf_counter()
    s = reduce(
        dirs, world_size=ranks.world_size, backend=ranks.backend,
        hosts={r: x.host for r, x in ranks.traces.items()}, damaged=damaged,
    )  # fmt: skip
    assert s.job is not None
    return {
        "wall_s": time.perf_counter() - t1,
        "discover_s": t1 - t,
        **_usage(),
        "ranks": len(dirs),
        "findings": [f.text for f in s.job.findings],
    }


def run_report(folder: Path, scheduler: str) -> dict[str, Any]:
    """``tracekit report FOLDER --scheduler ADDRESS`` (this checkout's), as a user runs it."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import conftest; "
        "from tracekit.cli import run; sys.argv[0] = 'tracekit'; sys.exit(run())"
    )
    cmd = [sys.executable, "-c", code, "report", str(folder), "--scheduler", scheduler]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": time.perf_counter() - t, "cpu_s": cpu, "rc": p.returncode,
            "stdout": p.stdout, "stderr": p.stderr[-2000:]}  # fmt: skip


def _child(argv: list[str]) -> int:
    _this_checkout()
    what, *rest = argv
    if what == "map":
        got = child_map(Path(rest[0]), Path(rest[1]), rest[2] or None, int(rest[3]))
    else:
        got = child_reduce(Path(rest[0]), Path(rest[1]))
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
    """``dask scheduler`` and ``workers`` x ``dask worker --nthreads 1``, each a separate
    process on 127.0.0.1 (as a user starts them); stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, workers: int, log: Path) -> None:
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        dask = shutil.which("dask") or "dask"
        port = self.address.rsplit(":", 1)[1]
        sched = [dask, "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"]
        self.procs = [self._start(sched, env)]
        self._wait_scheduler()
        for i in range(workers):
            worker = [dask, "worker", self.address, "--nthreads", "1", "--no-dashboard"]
            worker += ["--name", f"w{i}", "--memory-limit", "0"]
            self.procs.append(self._start(worker, env))
        self._wait_workers(workers)

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

    def cpu_s(self) -> float:
        """CPU seconds so far of the scheduler's and workers' process trees."""
        import psutil

        total = 0.0
        for p in self.procs:
            try:
                ps = psutil.Process(p.pid)
                for q in [ps, *ps.children(recursive=True)]:
                    t = q.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                continue
        return total

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


def measure(n: int, work: Path, dask: bool, report: bool, workers: int) -> dict[str, Any]:
    folder = work / f"job{n}"
    got: dict[str, Any] = {"ranks": n}
    b = build(folder, n)
    job = b.pop("job")
    got.update(b)
    got["map_local"] = run_child("map", str(folder), str(work / f"out{n}"), "", str(workers))
    got["reduce"] = run_child("reduce", str(folder), str(work / f"out{n}"))
    want = {job.straggler, job.stall, job.truncated, job.missing}
    named = " ".join(got["reduce"]["findings"])
    got["faults_named"] = all(f"rank {r}" in named for r in want) and (
        f"node {job.hosts[job.slow_node]}" in named
    )
    got["findings"] = len(got["reduce"].pop("findings"))
    if dask:
        cluster = Cluster(workers, work / f"dask{n}.log")
        try:
            before = cluster.cpu_s()
            got["map_dask"] = run_child(
                "map", str(folder), str(work / f"dask{n}"), cluster.address, str(workers)
            )
            got["map_dask"]["cluster_cpu_s"] = cluster.cpu_s() - before
            if report:
                r = run_report(folder, cluster.address)
                out = r.pop("stdout")
                r["faults_in_terminal"] = all(f"rank {x}" in out for x in want)
                got["report_dask"] = r
        finally:
            cluster.close()
    return got


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| ranks | traces | map, local pool: wall / CPU | map, Dask: wall / CPU (cluster) "
        "| reduce: wall / CPU / peak RSS | reduce per rank | faults named |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for g in rows:
        m, r = g["map_local"], g["reduce"]
        d = g.get("map_dask")
        dask = f"{d['wall_s']:.0f} s / {d['cpu_s'] + d['cluster_cpu_s']:.0f} CPU-s" if d else "—"
        out.append(
            f"| {g['ranks']} | {g['traces_mb']:.0f} MB | {m['wall_s']:.0f} s / "
            f"{m['cpu_s']:.0f} CPU-s | {dask} | {r['wall_s']:.2f} s / {r['cpu_s']:.2f} CPU-s / "
            f"{r['peak_rss_gb']:.2f} GB | {1e3 * r['wall_s'] / r['ranks']:.2f} ms | "
            f"{'all five' if g['faults_named'] else 'NOT ALL'} |"
        )
    return out


def extrapolate(rows: list[dict[str, Any]], target: int = 16_384) -> str:
    """A least-squares line through (ranks, reduce wall / CPU / RSS), read at ``target``."""
    import numpy as np

    x = np.array([g["reduce"]["ranks"] for g in rows], dtype=float)
    parts = []
    for key, unit in (("wall_s", "s wall"), ("cpu_s", "CPU-s"), ("peak_rss_gb", "GB")):
        y = np.array([g["reduce"][key] for g in rows], dtype=float)
        slope, icpt = np.polyfit(x, y, 1) if len(x) > 1 else (y[0] / x[0], 0.0)
        parts.append(f"{icpt + slope * target:.1f} {unit} ({1e3 * slope:.2f} m{unit} per rank)")
    return (
        f"extrapolated (a straight line through the {len(rows)} measured sizes, not measured): "
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
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    work = Path(a.keep or tempfile.mkdtemp(prefix="ranks_scale."))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for i, n in enumerate(sorted(a.ranks)):
            g = measure(n, work, n in a.dask_ranks, a.report and i == 0, a.workers)
            rows.append(g)
            print(json.dumps(g), flush=True)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(summary_lines(rows)))
    print(extrapolate(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

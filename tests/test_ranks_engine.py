"""tracekit.ranks.engine: per-rank work in bounded workers (local spawn pool or Dask), its
cache, its failures and its reduction input. Per-rank functions: tests/ranks_fns.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import tracekit.ranks.cluster as cluster
import tracekit.ranks.engine as engine
from tests import ranks_fns, tracegen
from tracekit.errors import TraceError, TracekitError, UsageError
from tracekit.parse import parse_to_dir
from tracekit.ranks import map_ranks, read_table
from tracekit.ranks.onerank import analyse_rank

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "h200-gpt2s-b8-s128-fp32-naive"


def _ranks(tmp: Path, n: int) -> dict[int, Path]:
    """n small rank traces (tracegen's, rank r's timestamps shifted by r ms)."""
    out = {}
    for r in range(n):
        doc = tracegen.small_trace()
        for e in doc["traceEvents"]:
            e["ts"] = e["ts"] + 1000 * r
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": n}
        out[r] = tracegen.write(doc, tmp / f"rank{r}.vm_{r}.1.pt.trace.json")
    return out


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """An in-process Dask cluster (the scheduler reached through its address, as
    --scheduler tcp://... would be)."""
    import distributed  # here: its import (~1 s) is paid only by the worker that runs these

    with distributed.LocalCluster(
        processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None
    ) as c:
        yield c.scheduler_address


def test_local_pool_one_fresh_process_per_rank(tmp_path: Path) -> None:
    traces = _ranks(tmp_path, 3)
    seen: list[int] = []
    res = map_ranks(
        ranks_fns.parse_counts,
        traces,
        tmp_path / "out",
        workers=2,
        on_result=lambda r: seen.append(r.rank),
    )
    assert [r.rank for r in res] == [0, 1, 2] and sorted(seen) == [0, 1, 2]
    single = parse_to_dir(traces[0], tmp_path / "single").meta["counts"]
    assert single["kernels"] == 5 and single["memcpy"] == 1 and single["steps"] == 2
    for r in res:
        assert r.value == {"counts": single, "events": len(tracegen.small_trace()["traceEvents"])}
        assert not r.cached and r.peak_rss_bytes > 20 << 20 and r.cpu_s > 0
        assert r.out == tmp_path / "out" / f"rank{r.rank}"
        assert r.trace_bytes == traces[r.rank].stat().st_size and r.out_bytes > 0
        record = json.loads((r.out / "rank.json").read_text())
        assert record["value"] == r.value and record["key"]["file"] == traces[r.rank].name
    assert len({r.worker for r in res}) == 3  # a new process per rank
    assert _leftovers(tmp_path / "out") == ["rank0", "rank1", "rank2"]
    k = read_table(res, "tables/kernels.parquet", ["ts", "dur"])
    assert k.column_names == ["rank", "ts", "dur"]
    n = pq.read_metadata(tmp_path / "single" / "kernels.parquet").num_rows
    assert n == 6 and k.column("rank").to_pylist() == [0] * n + [1] * n + [2] * n
    # times are relative to each rank's trace start: equal in the shifted copies
    ts = k.column("ts").to_pylist()
    assert ts[:n] == ts[n : 2 * n] == ts[2 * n :]


def test_each_rank_is_forked_from_a_server_that_imported_the_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's fork server has imported pandas, pyarrow and tracekit's stages once
    (tracekit.preload); each rank still runs in a process of its own, with the
    pool's environment as it is when the rank starts (not the server's)."""
    monkeypatch.setenv(engine.POOL_ENV, "forkserver")  # as tests/conftest.py sets it
    traces = _ranks(tmp_path, 3)
    map_ranks(ranks_fns.what_it_started_with, {0: traces[0]}, tmp_path / "first")  # a server
    monkeypatch.setenv("TRACEKIT_TEST_MARK", "now")
    res = map_ranks(ranks_fns.what_it_started_with, traces, tmp_path / "out", workers=2)
    assert [r.value["env"] for r in res] == ["now"] * 3
    # the server forks with one thread (no jemalloc or OpenBLAS threads): fork-safe
    assert {r.value["parent_threads"] for r in res} <= {1, None}
    assert all(r.value["pandas"] for r in res)
    assert len({r.value["pid"] for r in res}) == 3 and os.getpid() not in {
        r.value["pid"] for r in res
    }
    assert len({r.value["ppid"] for r in res}) == 1  # the server
    assert res[0].value["ppid"] != os.getpid()


def test_the_fork_server_where_it_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: spawn a first wave alone (its processes import in parallel); fork once more
    ranks than workers, and from then on in this process (its server runs)."""
    monkeypatch.setattr(engine, "_served", False)
    monkeypatch.setenv(engine.POOL_ENV, "auto")
    assert engine.pool_context(2, 2).get_start_method() == "spawn"
    assert engine.pool_context(3, 2).get_start_method() == "forkserver"
    assert engine.pool_context(1, 2).get_start_method() == "forkserver"
    monkeypatch.setenv(engine.POOL_ENV, "spawn")
    assert engine.pool_context(9, 2).get_start_method() == "spawn"
    monkeypatch.setattr(engine, "_served", False)
    monkeypatch.setenv(engine.POOL_ENV, "forkserver")
    assert engine.pool_context(1, 2).get_start_method() == "forkserver"
    monkeypatch.setenv(engine.POOL_ENV, "fork")
    with pytest.raises(UsageError, match="TRACEKIT_RANK_POOL must be auto, forkserver or spawn"):
        engine.pool_context(1, 2)


def test_a_spawned_worker_freezes_its_objects_before_it_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a fork server each rank's process is spawned: it imports what it needs
    itself, and its exit then skips the collector's walk over everything pandas and
    pyarrow made (tracekit.io.freeze_before_exit). A forked one ends without teardown."""
    monkeypatch.setenv(engine.POOL_ENV, "spawn")
    traces = _ranks(tmp_path, 1)
    (res,) = map_ranks(ranks_fns.what_it_started_with, traces, tmp_path / "a")
    assert res.value["pandas"] is False and res.value["ppid"] == os.getpid()
    map_ranks(ranks_fns.notes_the_exit, traces, tmp_path / "b")
    assert int((traces[0].parent / f"{traces[0].name}.frozen").read_text()) > 0


def test_cache_key_reuse_and_invalidation(tmp_path: Path) -> None:
    traces = _ranks(tmp_path, 2)
    out = tmp_path / "out"
    first = map_ranks(ranks_fns.parse_counts, traces, out, workers=2)
    again = map_ranks(ranks_fns.parse_counts, traces, out, workers=2)
    assert [r.cached for r in again] == [True, True]
    assert [(r.value, r.worker, r.wall_s) for r in again] == [
        (r.value, r.worker, r.wall_s) for r in first
    ]
    st = traces[1].stat()
    os.utime(traces[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same bytes, newer mtime
    assert [r.cached for r in map_ranks(ranks_fns.parse_counts, traces, out)] == [True, False]
    one = {0: traces[0]}
    (newer,) = map_ranks(ranks_fns.parse_counts, one, out, version="2")  # another version
    (same,) = map_ranks(ranks_fns.parse_counts, one, out, version="2")
    (forced,) = map_ranks(ranks_fns.parse_counts, one, out, version="2", force=True)
    assert (newer.cached, same.cached, forced.cached) == (False, True, False)
    assert forced.worker != newer.worker == same.worker
    key = engine.cache_key(traces[0], "m:f", "v")
    assert set(key) == {
        "function", "version", "tracekit", "schema_version", "file", "size", "mtime_ns",
        "head_sha256",
    }  # fmt: skip
    assert key["size"] == traces[0].stat().st_size and key["function"] == "m:f"


def test_bad_rank_stops_the_others_and_leaves_nothing(tmp_path: Path) -> None:
    traces = _ranks(tmp_path, 3)
    bad = tmp_path / "bad.rank1.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": ')
    traces[1] = bad
    out = tmp_path / "out"
    t0 = time.monotonic()
    with pytest.raises(TraceError) as e:
        map_ranks(ranks_fns.slow_unless_bad, traces, out, workers=3)
    assert time.monotonic() - t0 < 60  # the sleeping ranks were stopped, not awaited
    msg = str(e.value)
    assert msg.startswith("rank 1") and str(bad) in msg and "\n" not in msg
    assert _leftovers(out) == []  # no folder, no temporary folder, of any rank
    for r in (0, 2):
        pid_file = traces[r].with_name(traces[r].name + ".pid")
        if pid_file.exists():  # it had started: it is gone now
            assert not _alive(int(pid_file.read_text()))


def test_per_rank_function_bugs_and_names(tmp_path: Path) -> None:
    traces = _ranks(tmp_path, 1)
    with pytest.raises(RuntimeError, match=r"(?s)rank 0 .*ZeroDivisionError"):
        map_ranks(ranks_fns.divides_by_zero, traces, tmp_path / "out", workers=1)
    with pytest.raises(RuntimeError, match=r"rank\.json, the engine's own file"):
        map_ranks(ranks_fns.writes_record, traces, tmp_path / "out", workers=1)
    assert _leftovers(tmp_path / "out") == []
    with pytest.raises(UsageError, match="module-level"):
        map_ranks(lambda t, o: 1, traces, tmp_path / "out")
    with pytest.raises(UsageError, match="cannot be imported"):
        map_ranks("tests.ranks_fns:nope", traces, tmp_path / "out")
    with pytest.raises(UsageError, match=r"rank 3: .*: no such file"):
        map_ranks(ranks_fns.parse_counts, {3: tmp_path / "gone.json"}, tmp_path / "out")


def test_default_workers_bounded_by_cores_ranks_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = [tracegen.write(tracegen.small_trace(), tmp_path / f"r{i}.json") for i in range(10)]
    monkeypatch.setattr(engine, "_cores", lambda: 16)
    monkeypatch.setattr(engine, "available_memory", lambda: 5 << 30)
    assert engine.default_workers(traces, memory_per_worker=1 << 30) == 4  # 0.8 x 5 GiB / 1 GiB
    assert engine.default_workers(traces[:3], memory_per_worker=1 << 30) == 3
    assert engine.default_workers(traces, memory_per_worker=8 << 30) == 1
    monkeypatch.setattr(engine, "available_memory", lambda: 1 << 40)
    assert engine.default_workers(traces) == 10
    gz = tracegen.write(tracegen.small_trace(), tmp_path / "r.json.gz")
    assert engine.worker_memory([gz]) == int(
        engine.WORKER_BASE + engine.WORKER_PER_JSON_BYTE * 8 * gz.stat().st_size
    )


_STOPPER = """
import signal, sys
# Ctrl-C raises KeyboardInterrupt, as in a terminal's foreground process, even where this
# process inherited SIGINT ignored (a background job of a non-interactive shell)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {root!r})
from tracekit.ranks import map_ranks
try:
    map_ranks("tests.ranks_fns:slow_unless_bad", {traces!r}, {out!r}, workers=2)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupt_or_kill_stops_every_worker(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C in the parent (or the parent killed): no worker outlives it, no folder left."""
    traces = {r: str(p) for r, p in _ranks(tmp_path, 2).items()}
    out = tmp_path / "out"
    code = _STOPPER.format(root=str(ROOT), traces=traces, out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    pid_files = [Path(p + ".pid") for p in traces.values()]
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in pid_files) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(p.exists() for p in pid_files), "the workers did not start"
    pids = [int(p.read_text()) for p in pid_files]
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == (130 if sig == signal.SIGINT else -signal.SIGKILL)
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
    assert _leftovers(out) == []


def test_ranks_travel_to_dask_in_batches() -> None:
    assert cluster.batch_size(64, 2) == 8  # 8 Dask tasks: 4 per worker thread
    assert cluster.batch_size(4096, 2) == cluster.MAX_BATCH
    assert cluster.batch_size(1024, 1024) == 1  # a cluster as large as the job
    assert cluster.batch_size(5, 0) == 1
    tasks = [engine.Task("m:f", r, f"t{r}", f"o{r}", {}) for r in range(5)]
    assert [[t.rank for t in b] for b in cluster.batches(tasks, 2)] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("batch", [1, 2])
def test_dask_path_writes_the_same_results(
    tmp_path: Path, dask_address: str, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster, "batch_size", lambda ranks, threads: batch)
    traces = _ranks(tmp_path, 2)
    local = map_ranks(ranks_fns.parse_counts, traces, tmp_path / "local", workers=2)
    remote = map_ranks(ranks_fns.parse_counts, traces, tmp_path / "dask", scheduler=dask_address)
    assert [r.value for r in remote] == [r.value for r in local]
    # each rank in a process of its own, not in the (in-process) Dask worker
    assert len({r.worker for r in remote}) == 2
    assert not any(r.worker.endswith(f":{os.getpid()}") for r in remote)
    for a, b in zip(local, remote, strict=True):
        for name in ("kernels", "ops", "steps", "runtime", "memory"):
            ta = pq.read_table(a.out / "tables" / f"{name}.parquet")
            assert ta.equals(pq.read_table(b.out / "tables" / f"{name}.parquet")), name
    again = map_ranks(ranks_fns.parse_counts, traces, tmp_path / "dask", scheduler=dask_address)
    assert [r.cached for r in again] == [True, True]


def test_dask_failure_names_the_rank(tmp_path: Path, dask_address: str) -> None:
    traces = _ranks(tmp_path, 2)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    traces[1] = bad
    with pytest.raises(TraceError, match=r"^rank 1"):
        map_ranks(ranks_fns.parse_counts, traces, tmp_path / "out", scheduler=dask_address)
    assert ".rank1" not in " ".join(_leftovers(tmp_path / "out"))


@pytest.mark.parametrize("on_dask", [False, True])
def test_worker_that_dies_is_named(tmp_path: Path, dask_address: str, on_dask: bool) -> None:
    traces = _ranks(tmp_path, 1)
    with pytest.raises(TracekitError, match=r"^rank 0 \(.*\): its worker process ended "
                       r"without a result, exit status 3$"):  # fmt: skip
        map_ranks(
            ranks_fns.exits, traces, tmp_path / "out", scheduler=dask_address if on_dask else None
        )
    assert _leftovers(tmp_path / "out") == []


def test_scheduler_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = _ranks(tmp_path, 1)
    with pytest.raises(UsageError, match="expected a Dask scheduler address"):
        map_ranks(ranks_fns.parse_counts, traces, tmp_path / "out", scheduler="localhost:8786")
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 0.5)
    with pytest.raises(UsageError, match="cannot connect"):
        map_ranks(ranks_fns.parse_counts, traces, tmp_path / "out", scheduler="tcp://127.0.0.1:9")


def test_analyse_rank_is_the_single_trace_summary(tmp_path: Path, dask_address: str) -> None:
    """The reference per-rank function gives a rank exactly the one-trace report's figures,
    in a local worker and on Dask alike."""
    from tracekit.classify import classify
    from tracekit.parse import load
    from tracekit.summary import summarize

    trace = next(FIXTURE.glob("*.pt.trace.json.gz"))
    copy = tmp_path / "rank0.vm_1.2.pt.trace.json.gz"
    shutil.copy(trace, copy)
    t = load(copy)
    want: dict[str, Any] = summarize(t, classify(t)).summary
    (res,) = map_ranks(analyse_rank, {0: copy}, tmp_path / "local", workers=1)
    (on_dask,) = map_ranks(analyse_rank, {0: copy}, tmp_path / "dask", scheduler=dask_address)
    assert res.value == on_dask.value
    assert res.value["step_time_ms"] == pytest.approx(want["step_time_ms"], abs=0)
    assert res.value["time_share_pct"] == want["time_share_pct"]
    assert res.value["steps"] == want["steps"] == [2]
    assert res.value["kernels"] == int((t.kernels["kind"] == "kernel").sum()) == 1024
    got = json.loads((res.out / "summary.json").read_text())
    assert (
        got["step_time_ms"] == want["step_time_ms"] and got["gpu_idle_pct"] == want["gpu_idle_pct"]
    )
    assert sorted(p.name for p in res.out.iterdir()) == [
        "classes.parquet", "rank.json", "steps.parquet", "summary.json", "tables"
    ]  # fmt: skip

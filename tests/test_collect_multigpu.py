"""``tracekit collect --gpus N`` on CPU with gloo: the elastic launcher, the rank<R>.* run
folder and its merged manifest, the interconnect sweep, a failing rank, Ctrl-C; and the
sweep's GPU-count axis. Every real run has a time limit (SIGALRM in this process, or a
subprocess timeout), so a hang fails a test instead of blocking the suite."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import re
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import child_sitecustomize
from tests._limits import time_limit
from tracekit.collectors import commcost
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.dist_manifest import build_manifest, merge_metrics
from tracekit.collectors.distributed import WORKER_ENV_DEFAULTS, worker_env
from tracekit.collectors.faults import FAULT_DIR_ENV, FAULT_ENV
from tracekit.collectors.interconnect import bus_factor, elements, peak, size_row
from tracekit.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--device", "cpu", "--preset", "tiny", "--batch", "2", "--seq", "16", "--steps", "2",
        "--warmup", "1", "--profile-wait", "0", "--profile-warmup", "0", "--profile-active",
        "1", "--comm-rounds", "1", "--comm-steps", "1", "-q"]  # fmt: skip
LIMIT_S = 240  # a run still going after this is hung (they take 10-30 s on 2 loaded cores)
TRACE = r"rank{r}\.[^.]+_\d+\.\d+"  # rank<R>.<host>_<pid>.<time_ns>


def _child_env(tmp_path_factory: pytest.TempPathFactory, *lines: str) -> dict[str, str]:
    """The environment of the processes a test starts: like the tests themselves they
    import this checkout (conftest's binding, run from a sitecustomize, with ``lines``
    after it), whichever tracekit is installed."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(child_sitecustomize(*lines))
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, *WORKER_ENV_DEFAULTS)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture  # per test (cheap): a module fixture would tie its tests to one xdist worker
def child_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _child_env(tmp_path_factory)


def _collect(env: dict[str, str], out: Path, *extra: str, **more_env: str) -> Any:
    """``tracekit collect`` in this process (the ranks are processes of their own), with
    ``env`` as the environment: (exit code, stdout, stderr)."""
    from tracekit.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as mp,
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        time_limit(LIMIT_S),
    ):
        for k in set(os.environ) - set(env):
            mp.delenv(k)
        for k, v in {**env, **more_env}.items():
            mp.setenv(k, v)
        code = main(["collect", *FAST, *extra, "-o", str(out)])
    return code, stdout.getvalue(), stderr.getvalue()


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())  # type: ignore[no-any-return]


def _trace(out: Path, name: str) -> dict[str, Any]:
    return json.loads(gzip.decompress((out / name).read_bytes()))  # type: ignore[no-any-return]


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------ a real DDP run


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``tracekit collect --gpus 2`` with every pass a GPU rank runs: the light timeline
    pass stood in on CPU in every rank (tests/test_rank_passes.py, through the ranks'
    sitecustomize), its cost in 2 interleaved rounds, 2 rounds x 2 steps of the
    communication cost, the full pass with stacks, the interconnect sweep."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    env = _child_env(tmp_path_factory, "from tests.standins import stand_in_light_pass",
                     "stand_in_light_pass()")  # fmt: skip
    code, stdout, stderr = _collect(env, out, "--gpus", "2", "--with-stack", "--comm-rounds", "2",
                                    "--comm-steps", "2", "--light-cost-rounds", "2",
                                    NCCL_NVLS_ENABLE="1")  # fmt: skip
    assert code == 0, stderr
    return out, stdout


def test_ddp_run_folder_is_the_documented_layout(ddp_run: Any) -> None:
    out, _ = ddp_run
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    logs = [f"logs/rank{r}.{s}.log" for r in (0, 1) for s in ("stderr", "stdout")]
    assert [n for n in names if n.startswith("logs")] == ["logs", *logs]
    rest = [n for n in names if not n.startswith("logs")]
    expected = ["manifest.json", "tensorboard"]
    ranks = _manifest(out)["distributed"]["ranks"]
    for r in (0, 1):
        kinds = ["profiler_flops.json.gz", "pt.trace.json.gz"]
        # torch's memory-timeline analysis sometimes fails on a DDP rank (AssertionError:
        # duplicate outputs); the rank then says why and the trace is kept
        if ranks[r]["artifacts"]["memory_timeline"]:
            kinds.append("memory_timeline.json.gz")
        else:
            assert (
                "export_memory_timeline failed" in ranks[r]["artifacts"]["memory_timeline_absent"]
            )
        for kind in kinds:
            found = [n for n in rest if re.fullmatch(TRACE.format(r=r) + re.escape("." + kind), n)]
            assert len(found) == 1, (r, kind, rest)
            expected += found
        arts = ranks[r]["artifacts"]  # the light pass's timeline and its step boundaries
        for name in [*arts["timeline_traces"], arts["timeline_steps"]]:
            assert name.startswith(f"rank{r}.") and name in rest, (r, name, rest)
            expected.append(name)
    assert sorted(rest) == sorted(expected)  # no result files, no launch spec, no temporaries
    assert _leftovers(out.parent) == []


def test_ddp_manifest_describes_every_rank(ddp_run: Any) -> None:
    out, _ = ddp_run
    m = _manifest(out)
    assert m["status"] == "ok" and m["error"] is None
    assert m["config"]["gpus"] == 2 and m["config"]["parallel"] == "ddp"
    d = m["distributed"]
    assert (d["world_size"], d["backend"], d["parallel"]) == (2, "gloo", "ddp")
    assert d["launcher"] == "torch.distributed.launcher.api.elastic_launch"
    assert (d["global_batch"], d["per_rank_batch"], d["global_tokens_per_step"]) == (4, 2, 64)
    assert d["wrapping"]["wrapper"] == "torch.nn.parallel.DistributedDataParallel"
    assert d["failed_rank"] is None
    # the NVLS switches: set by tracekit, except the one this run's user set
    assert d["env"]["NCCL_NVLS_ENABLE"] == {"value": "1", "source": "user"}
    assert d["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == {"value": "1", "source": "tracekit"}
    assert d["env"]["NVSHMEM_DISABLE_NVLS"] == {"value": "1", "source": "tracekit"}
    ranks = d["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["status"] == "ok" and r["error"] is None and r["device"]["type"] == "cpu"
        arts = r["artifacts"]
        assert arts["trace"].startswith(f"rank{r['rank']}.") and arts["traces"] == [arts["trace"]]
        assert (arts["memory_timeline"] or f"rank{r['rank']}.").startswith(f"rank{r['rank']}.")
        assert arts["profiler_flops"].startswith(f"rank{r['rank']}.")
        assert r["logs"]["stderr"] == f"logs/rank{r['rank']}.stderr.log"
        assert r["metrics"]["step_time_ms"]["n"] == 2
    assert m["artifacts"]["traces"] == [r["artifacts"]["trace"] for r in ranks]
    assert m["artifacts"]["trace"] == ranks[0]["artifacts"]["trace"]
    # top-level metrics: the slowest rank's step, the global batch's throughput
    met, medians = m["metrics"], [r["metrics"]["step_time_ms"]["median"] for r in ranks]
    assert met["step_time_median_ms_by_rank"] == medians
    assert met["step_time_ms"]["median"] == max(medians)
    assert met["slowest_rank"] == medians.index(max(medians))
    assert met["tokens_per_s"] == pytest.approx(4 * 16 / (max(medians) / 1e3))
    assert met["tokens_per_s_per_gpu"] == pytest.approx(met["tokens_per_s"] / 2)
    losses = [r["metrics"]["final_loss"] for r in ranks]
    assert met["final_loss"] == pytest.approx(sum(losses) / 2) and losses[0] != losses[1]
    assert m["device"] == ranks[0]["device"] and m["versions"]["torch"]


def test_every_rank_trace_keeps_distributed_info(ddp_run: Any) -> None:
    out, _ = ddp_run
    for r, name in enumerate(_manifest(out)["artifacts"]["traces"]):
        doc = _trace(out, name)
        info = doc["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (r, 2, "gloo")
        names = {e.get("name", "") for e in doc["traceEvents"]}
        assert any("allreduce" in n for n in names)  # DDP's gradient all-reduce


def test_interconnect_sweep_follows_nccl_tests(ddp_run: Any) -> None:
    out, _ = ddp_run
    ic = _manifest(out)["ceilings"]["interconnect"]
    assert ic["bus_factor"]["all_reduce"] == "2(n-1)/n" and ic["bus_factor"]["broadcast"] == "1"
    assert ic["bus_factor_value"] == {"all_reduce": 1.0, "all_gather": 0.5,
                                      "reduce_scatter": 0.5, "broadcast": 1.0}  # fmt: skip
    for coll, res in ic["collectives"].items():
        sizes = res["sizes"]
        assert [s["bytes"] for s in sizes] == [2**10 * 4**i for i in range(7)]  # 1 KiB..4 MiB
        for s in sizes:
            assert s["time_us_p10"] <= s["time_us"] <= s["time_us_p90"]
            assert s["algbw_Bps"] == pytest.approx(s["bytes"] / (s["time_us"] / 1e6))
            assert s["busbw_Bps"] == pytest.approx(s["algbw_Bps"] * ic["bus_factor_value"][coll])
        best = max(sizes, key=lambda s: s["busbw_Bps"])
        assert (res["peak_busbw_Bps"], res["peak_at_bytes"]) == (best["busbw_Bps"], best["bytes"])
    ar = ic["collectives"]["all_reduce"]
    assert (ic["busbw_Bps"], ic["peak_at_bytes"]) == (ar["peak_busbw_Bps"], ar["peak_at_bytes"])


def test_summary_and_single_trace_tools(ddp_run: Any) -> None:
    out, stdout = ddp_run
    assert "ranks: 2 (gloo, ddp); global batch 4 = 2 x 2" in stdout
    assert "interconnect: all-reduce busbw" in stdout
    from tracekit.parse import load

    t = load(out)  # rank 0's trace (artifacts.trace): the single-trace tools' choice
    assert t.manifest is not None and len(t.steps) == 1


def test_every_rank_analysed_and_its_gloo_collectives_matched(ddp_run: Any, tmp_path: Path) -> None:
    """The multi-rank analysis on real gloo ranks: discovery from the manifest, each rank's
    gloo spans as its collectives, matched across ranks by group and order, the measured
    interconnect as the ceiling; report refuses CPU traces in one line, parse takes all."""
    from tracekit.cli import main
    from tracekit.ranks import perrank
    from tracekit.ranks.discover import discover
    from tracekit.ranks.reduce import reduce

    out, _ = ddp_run
    rs = discover(out)
    assert rs is not None and rs.ranks == [0, 1] and rs.backend == "gloo"
    assert all(t.rank_from == "distributedInfo" for t in rs.traces.values())
    dirs = {r: tmp_path / f"rank{r}" for r in rs.ranks}
    for r, d in dirs.items():
        perrank.analyse(rs.traces[r].path, d)
    s = reduce(dirs, world_size=2, backend="gloo", manifest=rs.manifest,
               hosts={r: t.host for r, t in rs.traces.items()})  # fmt: skip
    assert s.on == "cpu" and s.exposed_comm_pct is None and len(s.steps) == 1
    inst = s.instances
    assert set(inst["on"]) == {"cpu"} and set(inst["name"].str.split(":").str[0]) == {"gloo"}
    assert inst.groupby("rank").size().tolist() == [len(inst) // 2] * 2
    m = s.collectives
    assert len(m) >= 1 and m["complete"].all() and m["consistent"].all()
    assert "all_reduce" in set(m["kind"]) and (m["ranks"] == 2).all()
    ar = m[m["kind"] == "all_reduce"]
    assert (ar["message_bytes"] > 0).all() and (ar["dtype"] == "fp32").all()
    assert (m["transfer_ns"] >= 0).all() and (m["wait_max_ns"] <= m["dur_max_ns"]).all()
    assert s.ceiling is not None and s.ceiling.source == "measured"
    assert not s.clock.aligned  # one host, one clock
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 2
        assert main(["parse", str(out), "-o", str(tmp_path / "tables")]) == 0
    assert "CPU-only traces (2 ranks, gloo)" in stderr.getvalue()
    assert len(stderr.getvalue().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["rank0", "rank1"]


def test_sweep_row_of_a_multi_gpu_run(ddp_run: Any) -> None:
    from tracekit.sweep.plan import Point
    from tracekit.sweep.rows import run_row

    out, _ = ddp_run
    m = _manifest(out)
    row = run_row(Point(2, 16, "fp32", "naive", 2), out, m, with_trace=False)
    assert row["key"] == "b2-s16-fp32-naive-g2" and row["gpus"] == 2 and row["tokens"] == 32
    assert row["tokens_per_s"] == m["metrics"]["tokens_per_s"]
    assert row["tokens_per_s_per_gpu"] == m["metrics"]["tokens_per_s"] / 2
    assert row["interconnect_busbw_Bps"] == m["ceilings"]["interconnect"]["busbw_Bps"]
    assert row["parallel"] == "ddp" and math.isnan(row.get("model_peak_bytes", math.nan))
    assert "the memory model is for one GPU" in row["notes"]


def test_each_rank_ran_the_light_pass_and_its_cost_rounds(ddp_run: Any) -> None:
    out, _ = ddp_run
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok"
    ranks = m["distributed"]["ranks"]
    assert [(r["rank"], r["status"]) for r in ranks] == [(0, "ok"), (1, "ok")]
    for r in ranks:
        light = r["artifacts"]["timeline_trace"]
        assert light.startswith(f"rank{r['rank']}.") and (out / light).is_file()
        assert (out / r["artifacts"]["timeline_steps"]).is_file()
        assert r["metrics"]["timeline_step_time"]["n"] == 1
        # warm-up, 2 timed, comm cost (2 rounds x 2 steps, with and without sync), light
        # pass, its cost (2 rounds x 2 windows of 5 steps), full pass; --with-stack: the
        # memory timeline is the full pass's, no category step (decided from the options,
        # so also where torch's memory-timeline export failed on a DDP rank)
        if r["artifacts"]["memory_timeline"]:
            assert r["artifacts"]["memory_timeline_pass"] == "main window"
        assert r["total_steps"] == 1 + 2 + 2 * 2 * 2 + 1 + 2 * 2 * 5 + 1 + 10  # + residual
        assert r["metrics"]["timeline_cost"]["rounds"] == 2
    assert m["artifacts"]["timeline_trace"] == ranks[0]["artifacts"]["timeline_trace"]
    assert m["artifacts"]["timeline_traces"] == [
        t for r in ranks for t in r["artifacts"]["timeline_traces"]
    ]
    assert m["profiler"]["timeline"]["activities"] == ["cuda"]
    light = [r["metrics"]["timeline_step_time_ms"] for r in ranks]
    met = m["metrics"]
    assert met["timeline_step_time_ms"] == max(light)
    # the light pass's cost: the rank whose interleaved rounds put it highest
    costs = [r["metrics"]["timeline_cost"]["ratio"] for r in ranks]
    assert met["timeline_cost"]["ratio"] == max(costs)
    assert met["timeline_cost"]["rank"] == costs.index(max(costs))
    assert met["timeline_overhead_pct"] == pytest.approx(met["timeline_cost"]["pct"])


def test_comm_cost_in_the_manifest_and_summary(ddp_run: Any) -> None:
    out, stdout = ddp_run
    m = json.loads((out / "manifest.json").read_text())
    d = m["distributed"]
    c = d["comm_cost"]
    assert (c["status"], c["reason"], c["rounds"], c["steps_per_round"]) == ("ok", None, 2, 2)
    assert c["sync_off"] == commcost.DDP_SYNC_OFF and c["caveat"] is None
    assert [r["rank"] for r in c["ranks"]] == [0, 1]
    for x, entry in zip(c["ranks"], d["ranks"], strict=True):
        assert x["with_sync_ms"] > 0 and x["without_sync_ms"] > 0
        assert len(x["rounds_with_ms"]) == len(x["rounds_without_ms"]) == 2
        diffs = [a - b for a, b in zip(x["rounds_with_ms"], x["rounds_without_ms"], strict=True)]
        assert x["cost_ms"] == pytest.approx(statistics.median(diffs))
        assert x["cost_ms_range"] == pytest.approx([min(diffs), max(diffs)])
        assert entry["comm_cost"] == x  # the per-rank entry holds the same figures
    assert "communication cost (unprofiled, measured: 2 rounds x 2 steps" in stdout
    assert "rank 0 " in stdout.split("communication cost")[1].splitlines()[0]


# ------------------------------------------------------------------ FSDP2


def test_fsdp2_with_bf16_parameters(child_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "fsdp"
    args = ["--gpus", "2", "--parallel", "fsdp", "--dtype", "bf16", "--no-ceilings", "--steps",
            "1", "--warmup", "0"]  # fmt: skip
    code, _, stderr = _collect(child_env, out, *args)
    assert code == 0, stderr
    m = _manifest(out)
    d = m["distributed"]
    assert d["world_size"] == 2 and d["global_batch"] == 4 and m["ceilings"] is None
    assert d["wrapping"]["wrapper"].startswith("torch.distributed.fsdp.fully_shard")
    assert d["wrapping"]["mp_policy"] == {"param_dtype": "bfloat16", "reduce_dtype": "float32"}
    assert [r["status"] for r in d["ranks"]] == ["ok"] * 2
    for r, name in enumerate(m["artifacts"]["traces"]):
        doc = _trace(out, name)
        assert doc["distributedInfo"]["rank"] == r and doc["distributedInfo"]["world_size"] == 2
        names = " ".join({e.get("name", "") for e in doc["traceEvents"]})
        assert "all_gather" in names and "reduce_scatter" in names  # FSDP2's collectives


# ------------------------------------------------------------------ failures


def test_a_failing_rank_ends_the_run_and_is_named(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    """A rank that runs out of memory ends a 3-rank run with its status and exit code 3.
    (A rank that dies without a result goes through the same launcher and manifest code:
    tests/test_run_multigpu.py::test_a_rank_that_fails.)"""
    out = tmp_path / "run"
    status = "oom"
    message = "rank 1: OutOfMemoryError: CUDA out of memory (injected at step 2)"
    # rank 1 raises torch.OutOfMemoryError in the forward of global step 2, the second
    # timed step; the other ranks then wait for it in DDP's gradient all-reduce and must
    # not wait forever
    rc, _, stderr = _collect(child_env, out, "--gpus", "3", "--no-ceilings",
                             **{FAULT_ENV: "1:2:oom"})  # fmt: skip
    assert rc == 3, stderr
    err = stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tracekit: error: ") and message in err
    m = _manifest(out)
    assert m["status"] == status and m["error"] == message and m["metrics"] is None
    d = m["distributed"]
    assert d["failed_rank"] == 1 and d["ranks"][1]["status"] == status
    # the others are stopped by the launcher, or see their peer's connection close first
    assert all(r["status"] in ("terminated", "error") for r in d["ranks"] if r["rank"] != 1)
    assert sorted(p.name for p in out.iterdir()) == ["logs", "manifest.json", "tensorboard"]
    assert _leftovers(tmp_path) == []


def test_ctrl_c_stops_every_rank_and_leaves_nothing(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    out, pids = tmp_path / "run", tmp_path / "pids"
    pids.mkdir()
    done = threading.Event()

    def ctrl_c_once_both_ranks_hang() -> None:
        deadline = time.monotonic() + LIMIT_S
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        if not done.is_set() and len(list(pids.iterdir())) == 2:
            # what a terminal's Ctrl-C sends to tracekit (its ranks have sessions of their own)
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_once_both_ranks_hang, daemon=True).start()
    try:
        code, _, stderr = _collect(child_env, out, "--gpus", "2", "--no-ceilings",
                                   **{FAULT_ENV: "*:1:hang", FAULT_DIR_ENV: str(pids)})  # fmt: skip
    finally:
        done.set()
    assert code == 130 and stderr.strip() == "tracekit: interrupted"
    ranks = [int(p.read_text()) for p in pids.iterdir()]
    assert len(ranks) == 2
    for pid in ranks:  # stopped and reaped by the launcher before collect returned
        assert not Path(f"/proc/{pid}").exists(), f"rank process {pid} still exists"
    assert not out.exists() and _leftovers(tmp_path) == []


# ------------------------------------------------------------------ without processes


def test_bus_factors_and_size_rows() -> None:
    assert [bus_factor("all_reduce", n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]
    assert bus_factor("all_gather", 4) == bus_factor("reduce_scatter", 4) == 0.75
    assert bus_factor("broadcast", 8) == 1.0
    assert elements("all_reduce", 1024, 3) == 256 and elements("all_gather", 1024, 3) == 255
    row = size_row("all_reduce", 4, 2**18, [2e-3, 1e-3, 4e-3])  # 1 MiB, median 2 ms
    assert row["bytes"] == 2**20 and row["time_us"] == pytest.approx(2000)
    assert row["algbw_Bps"] == pytest.approx(2**20 / 2e-3)
    assert row["busbw_Bps"] == pytest.approx(2**20 / 2e-3 * 1.5)
    other = size_row("all_reduce", 4, 2**20, [4e-3])
    assert peak([row, other]) == {"peak_busbw_Bps": other["busbw_Bps"], "peak_at_bytes": 2**22}


def _rank_metrics(median: float, loss: float, peak_bytes: int | None) -> dict[str, Any]:
    def stats(m: float) -> dict[str, Any]:
        return {"median": m, "p10": m, "p90": m, "mean": m, "n": 5}

    return {"step_time_ms": stats(median), "profiled_step_time": stats(median * 1.1),
            "peak_allocated_bytes": peak_bytes, "peak_reserved_bytes": peak_bytes,
            "avg_allocated_bytes": peak_bytes and peak_bytes / 2, "final_loss": loss,
            "memory_method": "m"}  # fmt: skip


def _cfg(**kw: Any) -> CollectConfig:
    return CollectConfig(**{"preset": "tiny", "device": "cpu", "batch": 4, "seq": 32,
                            "gpus": 2, **kw})  # fmt: skip


def test_merge_metrics_takes_the_slowest_rank() -> None:
    met = merge_metrics(_cfg(), [_rank_metrics(10.0, 2.0, 100), _rank_metrics(12.5, 4.0, 300)])
    assert met["slowest_rank"] == 1 and met["step_time_ms"]["median"] == 12.5
    assert met["tokens_per_s"] == pytest.approx(2 * 4 * 32 / 12.5e-3)
    assert met["samples_per_s"] == pytest.approx(8 / 12.5e-3)
    assert met["step_time_skew_pct"] == pytest.approx(25.0)
    assert (met["peak_allocated_bytes"], met["peak_allocated_rank"]) == (300, 1)
    assert met["avg_allocated_bytes"] == 100 and met["final_loss"] == 3.0
    assert met["profiler_overhead_pct"] == pytest.approx(10.0)


def _result(rank: int, status: str = "ok", **kw: Any) -> dict[str, Any]:
    return {"rank": rank, "local_rank": rank, "host": "h", "pid": 100 + rank, "status": status,
            "error": None, "failed_at": None, "phase": "workload", "device": {"type": "cpu"},
            "metrics": _rank_metrics(10.0 + rank, 1.0, None) if status == "ok" else None,
            "artifacts": {"trace": f"rank{rank}.t.pt.trace.json.gz",
                          "traces": [f"rank{rank}.t.pt.trace.json.gz"]},
            "total_steps": 9, **kw}  # fmt: skip


def _launcher_failure(exitcode: int, sig: str | None = None, t: float = 100.0) -> dict[str, Any]:
    return {"exitcode": exitcode, "signal": sig, "timestamp": t}


def _build(results: dict[int, Any], failures: dict[int, Any], n: int = 2) -> dict[str, Any]:
    return build_manifest(_cfg(gpus=n), results, failures, env={}, launcher={})


def test_manifest_names_the_first_failure() -> None:
    # rank 2 ran out of memory first; rank 0 then saw its peer's socket close; the
    # launcher stopped rank 1 (SIGTERM, no result) and, as torch does, listed it too
    res = {0: _result(0, "error", error="RuntimeError: Connection closed by peer",
                      failed_at=105.5),
           2: _result(2, "oom", error="OutOfMemoryError: CUDA out of memory.",
                      failed_at=105.2)}  # fmt: skip
    fails = {0: _launcher_failure(1, t=105), 1: _launcher_failure(-15, "SIGTERM", 105),
             2: _launcher_failure(1, t=105)}  # fmt: skip
    m = _build(res, fails, n=3)
    assert m["status"] == "oom" and m["error"] == "rank 2: OutOfMemoryError: CUDA out of memory."
    d = m["distributed"]
    assert d["failed_rank"] == 2 and m["metrics"] is None
    assert [r["status"] for r in d["ranks"]] == ["error", "terminated", "oom"]
    assert d["ranks"][1]["signal"] == "SIGTERM" and d["ranks"][1]["artifacts"] is None
    # a rank that dies without a result is stamped by the launcher to the whole second: its
    # peer's "Connection reset by peer" may carry an earlier time and is still the effect
    # (seen in a clean-clone CI run: rank 0 was named)
    reset = (
        "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:8916: "
        "Connection reset by peer. This is typically caused by a remote worker hanging"
    )
    m = _build({0: _result(0, "error", error=reset, failed_at=992.92)},
               {0: _launcher_failure(1, t=993), 1: _launcher_failure(7, t=993)})  # fmt: skip
    assert m["distributed"]["failed_rank"] == 1
    assert m["error"] == "rank 1: exited with exit code 7 before writing its result"
    # only peers lost: the first by time stays the answer
    lost = {r: _result(r, "error", error=reset, failed_at=10.0 + r) for r in (0, 1)}
    assert _build(lost, {})["distributed"]["failed_rank"] == 0
    # a crash leaves no result: the launcher's exit code or signal says what happened
    m = _build({0: _result(0)}, {1: _launcher_failure(-11, "SIGSEGV")})
    assert m["error"] == "rank 1: exited with signal SIGSEGV before writing its result"
    m = _build({0: _result(0), 1: _result(1)}, {1: _launcher_failure(3)})
    assert m["error"] == "rank 1: exited with exit code 3 after finishing its work"
    ok = _build({0: _result(0), 1: _result(1)}, {})
    assert ok["status"] == "ok" and ok["metrics"]["slowest_rank"] == 1
    assert ok["artifacts"]["traces"] == ["rank0.t.pt.trace.json.gz", "rank1.t.pt.trace.json.gz"]


def test_files_of_ranks_stopped_mid_write_are_removed(tmp_path: Path) -> None:
    from tracekit.collectors.distributed import remove_partial_files
    from tracekit.io import atomic_file

    with pytest.raises(KeyboardInterrupt), atomic_file(tmp_path / "rank0.x.pt.trace.json.gz"):
        raise KeyboardInterrupt  # the temporary is removed when the writer can do it
    # a rank killed by the launcher cannot: what it leaves looks like this
    for name in (".rank0.result.json.k2j4.tmp", ".rank1.h_7.17.pt.trace.json.gz.x1.tmp.json.gz"):
        (tmp_path / name).write_text("{")
    (tmp_path / "rank1.h_7.17.pt.trace.json.gz").write_text("kept")
    assert remove_partial_files(tmp_path) == [
        ".rank0.result.json.k2j4.tmp",
        ".rank1.h_7.17.pt.trace.json.gz.x1.tmp.json.gz",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["rank1.h_7.17.pt.trace.json.gz"]


def test_worker_env_keeps_what_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in WORKER_ENV_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = worker_env(_cfg())
    assert env["NCCL_NVLS_ENABLE"] == {"value": "1", "source": "user"}
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == {"value": "1", "source": "tracekit"}
    assert env["NVSHMEM_DISABLE_NVLS"] == {"value": "1", "source": "tracekit"}
    assert env["OMP_NUM_THREADS"] == {"value": "3", "source": "user"}


def test_config_options_and_run_name() -> None:
    assert _cfg().run_name() == "tiny-b4-s32-fp32-naive-g2-ddp-cpu"
    assert _cfg(gpus=1).run_name() == "tiny-b4-s32-fp32-naive-cpu"  # one GPU: as always
    assert _cfg(gpus=4, parallel="fsdp").run_name() == "tiny-b4-s32-fp32-naive-g4-fsdp-cpu"
    for kw, msg in [({"gpus": 0}, "--gpus must be an integer >= 1"),
                    ({"parallel": "tp"}, "--parallel must be one of ddp, fsdp"),
                    ({"gpus": 1, "parallel": "fsdp"}, "needs --gpus 2 or more"),
                    ({"parallel": "fsdp", "dtype": "fp16"}, "fp32 and bf16")]:  # fmt: skip
        with pytest.raises(UsageError, match=re.escape(msg)):
            _cfg(**kw)


def test_cli_refusals_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from tracekit.cli import main

    out = tmp_path / "r"
    tiny = ["collect", "--preset", "tiny", "-o", str(out)]
    assert main([*tiny, "--gpus", "2", "--counters"]) == 2
    assert "--counters replays one process's step" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert main([*tiny, "--gpus", "4"]) == 2
    assert "--gpus 4 but only 2 CUDA device(s) are visible" in capsys.readouterr().err
    assert main([*tiny, "--gpus", "2", "--parallel", "fsdp", "--dtype", "fp16"]) == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ sweep --gpus


def test_sweep_plan_has_a_gpu_axis() -> None:
    from tracekit.sweep.plan import SweepPlan
    from tracekit.sweep.runner import collect_command

    plan = SweepPlan(batches=(4, 8), seqs=(128,), dtypes=("fp32",), attentions=("naive",),
                     gpus=(1, 2, 4), parallel="fsdp", device="cpu", preset="tiny")  # fmt: skip
    keys = [p.key for p in plan.points()]
    assert keys == ["b8-s128-fp32-naive", "b4-s128-fp32-naive", "b8-s128-fp32-naive-g2",
                    "b8-s128-fp32-naive-g4"]  # fmt: skip
    cmd = collect_command(plan, plan.points()[2], Path("x"), ceilings=True)
    assert cmd[cmd.index("--gpus") + 1] == "2" and cmd[cmd.index("--parallel") + 1] == "fsdp"
    assert "--gpus" not in collect_command(plan, plan.points()[0], Path("x"), ceilings=True)
    assert (
        len(SweepPlan(batches=(4, 8), seqs=(64,), gpus=(1, 2), grid=True).points()) == 2 * 2 * 2 * 2
    )
    with pytest.raises(UsageError):
        SweepPlan(gpus=(0,))


def _sweep_row(batch: int, gpus: int, tps: float, **kw: Any) -> dict[str, Any]:
    key = f"b{batch}-s128-fp32-naive" + (f"-g{gpus}" if gpus > 1 else "")
    return {"key": key, "batch": batch, "seq": 128, "dtype": "fp32", "attention": "naive",
            "gpus": gpus, "tokens": batch * 128, "status": "ok", "error": None,
            "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / gpus, "step_time_ms": 10.0,
            "peak_bytes": 1e9 * batch, "dynamic_peak_bytes": 1e8 * batch,
            "parallel": "ddp" if gpus > 1 else None, **kw}  # fmt: skip


def test_sweep_findings_give_the_scaling_efficiency() -> None:
    from tracekit.sweep.findings import findings
    from tracekit.sweep.fit import fit_table

    rows = [_sweep_row(b, 1, 1e4 * b) for b in (4, 8, 16)]
    rows += [_sweep_row(8, 2, 1.5e5, step_time_ms=10.7, interconnect_busbw_Bps=2.5e11)]
    table = pd.DataFrame(rows)
    fits = fit_table(table)
    batch = fits[(fits["quantity"] == "tokens_per_s") & (fits["axis"] == "batch")]
    assert list(batch["x_values"]) == ["4,8,16"] and list(batch["gpus"]) == [1]  # not mixed
    text = " ".join(findings(table, fits))
    assert (
        "Across GPUs (batch 8, seq 128, fp32, naive per GPU): 2 GPUs (ddp) reach 1.88x the "
        "tokens/s of 1, a scaling efficiency of 94 % (75,000 vs 80,000 tokens/s per GPU; "
        "step 10.00 -> 10.70 ms), all-reduce busbw up to 250.0 GB/s." in text
    )
    one_gpu = pd.DataFrame([_sweep_row(b, 1, 1e4 * b) for b in (4, 8, 16)]).drop(columns="gpus")
    assert "gpus" not in fit_table(one_gpu).columns  # a one-GPU sweep's fits are unchanged

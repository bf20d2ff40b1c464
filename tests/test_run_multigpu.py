"""``tracekit run --nproc-per-node N`` on CPU with gloo: a plain DDP script that knows nothing
of tracekit (``tests/scripts/ddp_mlp.py``) launched on 2 ranks as torchrun would, its
rank<R>.* run folder and merged manifest, the measured communication cost over the script's
own steps, the multi-rank analysis of the folder, a failing rank; and the step-end
machinery of the measurement (``collectors/script_comm.py``) on stand-ins. Every real run
has a time limit (SIGALRM), so a hang fails a test instead of blocking the suite."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import statistics
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import child_sitecustomize
from tests._limits import time_limit
from tracekit.collectors import commcost
from tracekit.collectors.distributed import WORKER_ENV_DEFAULTS
from tracekit.collectors.script_comm import (
    BoundaryRounds,
    CommHook,
    find_sync_target,
    parallel_kind,
)
from tracekit.collectors.script_dist import merge_metrics

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "ddp_mlp.py"
# 2 warm-up + 2 timed + 2 in the light timeline pass (stood in on CPU, below) + 2 profiled
# (wait 0, warm-up 1, active 1) = 8 steps, 10 in the residual check, 2 rounds x (5 + 5)
# steps of the light pass's cost = 20, then 2 rounds x (2 + 2) steps of the communication
# cost = 8: 46 steps
FAST = ["--steps", "2", "--warmup", "2", "--profile-wait", "0", "--profile-warmup", "1",
        "--profile-active", "1", "--no-memory-timeline", "--no-ceilings", "--comm-rounds", "2",
        "--comm-steps", "2", "--light-cost-rounds", "2", "-q"]  # fmt: skip
SCHEDULE, EXTRA = 8 + 10 + 20, 8
LIMIT_S = 240  # a run still going after this is hung


@pytest.fixture(scope="module")
def child_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The ranks' environment: they import this checkout, as the tests do."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(
        child_sitecustomize(
            "from tests.standins import stand_in_script_light_pass",
            "stand_in_script_light_pass()",
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in WORKER_ENV_DEFAULTS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run(env: dict[str, str], out: Path, *script_args: str) -> tuple[int, str, str]:
    """``tracekit run --nproc-per-node 2`` in this process (the ranks are processes of
    their own): (exit code, stdout, stderr)."""
    from tracekit.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    argv = ["run", "--nproc-per-node", "2", *FAST, "-o", str(out), "--", "python", str(SCRIPT)]
    with (
        pytest.MonkeyPatch.context() as mp,
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        time_limit(LIMIT_S),
    ):
        for k in set(os.environ) - set(env):
            mp.delenv(k)
        for k, v in env.items():
            mp.setenv(k, v)
        mp.chdir(out.parent)
        code = main([*argv, *script_args])
    return code, stdout.getvalue(), stderr.getvalue()


def _manifest(out: Path, name: str = "manifest.json") -> dict[str, Any]:
    return json.loads((out / name).read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def ddp_run(child_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("ddp") / "run"
    code, stdout, stderr = _run(child_env, out, "--iters", "50", "--print-env")
    assert code == 0, stderr
    return out, stdout


# ------------------------------------------------------------------ a real DDP script


def test_the_per_rank_run_folder(ddp_run: Any) -> None:
    out, _ = ddp_run
    m = _manifest(out)
    assert m["status"] == "ok" and m["error"] is None and m["workload"] == "script"
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"]  # nothing left beside it
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    d = m["distributed"]
    assert (d["world_size"], d["nproc_per_node"]) == (2, 2)
    assert (d["backend"], d["parallel"]) == ("gloo", "ddp")
    assert d["worker"] == "python -m tracekit.collectors.script_rank" and d["failed_rank"] is None
    assert d["global_batch"] == 16 and d["per_rank_batch"] == 8
    assert d["wrapping"]["wrapper"] == "torch.nn.parallel.distributed.DistributedDataParallel"
    arts = m["artifacts"]
    assert len(arts["traces"]) == 2 and arts["trace"] == arts["traces"][0]
    assert (arts["logs"], arts["tensorboard"]) == ("logs", "tensorboard")
    for r, entry in enumerate(d["ranks"]):
        assert (entry["rank"], entry["status"]) == (r, "ok")
        trace = entry["artifacts"]["trace"]
        assert trace == arts["traces"][r] and trace.startswith(f"rank{r}.")
        doc = json.loads(gzip.decompress((out / trace).read_bytes()))
        assert doc["distributedInfo"]["rank"] == r and doc["distributedInfo"]["world_size"] == 2
        assert entry["metrics"]["step_time_ms"]["n"] == 2
        assert entry["total_steps"] == SCHEDULE + EXTRA
        for stream in ("stdout", "stderr"):
            assert (out / entry["logs"][stream]).is_file()
        own = _manifest(out, entry["manifest"])  # the rank's own tracekit run manifest
        assert own["rank"] == r and own["artifacts"]["trace"] == trace
        assert own["comm_cost"]["ranks"][0]["rank"] == r
        light = entry["artifacts"]
        assert light["timeline_trace"].startswith(f"rank{r}.")
        assert light["timeline_trace"] in arts["timeline_traces"]
        sidecar = json.loads((out / own["artifacts"]["timeline_steps"]).read_text())
        assert own["artifacts"]["timeline_steps"].startswith(f"rank{r}.")
        assert len(sidecar["starts_ns"]) == 2  # its recorded step's start and its end
    assert len(arts["timeline_traces"]) == 2 and m["profiler"]["timeline"] is not None
    named = {p.name.split(".")[0] for p in out.iterdir() if p.is_file()} - {"manifest"}
    assert named == {"rank0", "rank1"}
    assert m["schedule"][-1] == {"phase": "comm_cost", "steps": [SCHEDULE + 1, SCHEDULE + EXTRA]}
    assert m["schedule_steps"] == m["total_steps"] == SCHEDULE + EXTRA
    assert m["script"]["ended"] == "stopped" and m["script"]["stopped_at_step"] == SCHEDULE + EXTRA
    met = m["metrics"]
    medians = [e["metrics"]["step_time_ms"]["median"] for e in d["ranks"]]
    assert met["step_time_median_ms_by_rank"] == medians
    assert met["step_time_ms"]["median"] == max(medians) and met["world_size"] == 2
    light = [e["metrics"]["timeline_step_time_ms"] for e in d["ranks"]]
    assert met["timeline_step_time_ms"] == max(light)
    costs = [e["metrics"]["timeline_cost"]["ratio"] for e in d["ranks"]]
    assert met["timeline_cost"]["ratio"] == max(costs)  # the light pass's cost, interleaved
    assert met["timeline_overhead_pct"] == pytest.approx(met["timeline_cost"]["pct"])


def test_the_script_gets_torchruns_environment(ddp_run: Any) -> None:
    out, _ = ddp_run
    for r in (0, 1):
        line = (out / "logs" / f"rank{r}.stdout.log").read_text().splitlines()[0]
        env = dict(kv.split("=", 1) for kv in line.split())
        assert (env["RANK"], env["LOCAL_RANK"]) == (str(r), str(r))
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "2")
        assert env["MASTER_ADDR"] != "None" and env["MASTER_PORT"].isdigit()
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"


def test_the_measured_communication_cost(ddp_run: Any) -> None:
    out, stdout = ddp_run
    d = _manifest(out)["distributed"]
    cost = d["comm_cost"]
    assert cost["status"] == "ok" and cost["reason"] is None
    assert cost["sync_off"] == "DistributedDataParallel.no_sync()" and cost["caveat"] is None
    assert (cost["rounds"], cost["steps_per_round"]) == (2, 2)
    assert "host timer" in cost["method"]
    assert [r["rank"] for r in cost["ranks"]] == [0, 1]
    for r, fig in enumerate(cost["ranks"]):
        assert len(fig["rounds_with_ms"]) == len(fig["rounds_without_ms"]) == 2
        pairs = zip(fig["rounds_with_ms"], fig["rounds_without_ms"], strict=True)
        diffs = [a - b for a, b in pairs]
        assert fig["cost_ms"] == pytest.approx(statistics.median(diffs))
        assert fig["cost_ms_range"] == pytest.approx([min(diffs), max(diffs)])
        assert fig["with_sync_ms"] > 0 and fig["without_sync_ms"] > 0
        assert d["ranks"][r]["comm_cost"] == fig
    assert "communication cost (unprofiled, measured: 2 rounds x 2 steps" in stdout


def test_the_multi_rank_analysis_of_the_folder(ddp_run: Any, tmp_path: Path) -> None:
    """As for ``collect --gpus 2``'s gloo folder: both ranks discovered from the manifest,
    their gloo all-reduces matched; ``report`` says in one line that CPU ranks have no GPU
    activity to report on, ``parse`` writes every rank's tables."""
    from tracekit.cli import main
    from tracekit.ranks import perrank
    from tracekit.ranks.discover import discover
    from tracekit.ranks.reduce import reduce

    out, _ = ddp_run
    rs = discover(out)
    assert rs is not None and rs.ranks == [0, 1] and rs.backend == "gloo"
    dirs = {r: tmp_path / f"rank{r}" for r in rs.ranks}
    for r, folder in dirs.items():
        perrank.analyse(rs.traces[r].path, folder)
    s = reduce(dirs, world_size=2, backend="gloo", manifest=rs.manifest,
               hosts={r: t.host for r, t in rs.traces.items()})  # fmt: skip
    m = s.collectives
    assert s.on == "cpu" and len(m) >= 1 and m["complete"].all() and m["consistent"].all()
    assert "all_reduce" in set(m["kind"])
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 2
        assert main(["parse", str(out), "-o", str(tmp_path / "tables")]) == 0
    assert "CPU-only traces (2 ranks, gloo)" in stderr.getvalue()
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["rank0", "rank1"]


@pytest.mark.parametrize(
    ("how", "code", "error"),
    [
        ("raise", 1, "rank 1: ValueError: rank 1 gives up at iteration 3"),
        ("die", 7, "rank 1: exited with exit code 7 before writing its result (rank 1 dies at "
         "iteration 3)"),
    ],
)  # fmt: skip
def test_a_rank_that_fails(
    how: str, code: int, error: str, child_env: dict[str, str], tmp_path: Path
) -> None:
    """The run fails with the rank that failed: one line naming it, its exit status,
    status error; the other rank stopped by the launcher."""
    out = tmp_path / "fails"
    args = ["--iters", "40", "--fail-rank", "1", "--fail-at", "3", "--fail-how", how]
    got, _, stderr = _run(child_env, out, *args)
    assert got == code
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracekit: error: {error} ("), stderr
    assert "logs/rank1.stderr.log" in lines[0]
    m = _manifest(out)
    assert m["status"] == "error" and m["error"] == error
    d = m["distributed"]
    assert d["failed_rank"] == 1 and d["ranks"][1]["status"] == "error"
    assert d["ranks"][0]["status"] in ("terminated", "error")
    assert m["metrics"] is None and d["comm_cost"]["status"] == "failed"
    assert (
        f"rank 1 {'gives up' if how == 'raise' else 'dies'}"
        in (out / "logs" / "rank1.stderr.log").read_text()
    )
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_loop_that_ends_before_the_schedule(child_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "short"
    code, _, stderr = _run(child_env, out, "--iters", "5")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "tracekit: error: rank 0: the loop ended after 5 steps (1 of the 2 steps of the light "
    ), stderr
    m = _manifest(out)
    d = m["distributed"]
    assert m["status"] == "incomplete" and [r["status"] for r in d["ranks"]] == ["incomplete"] * 2
    assert d["failed_rank"] is None and m["metrics"] is None
    assert d["comm_cost"]["status"] == "failed"
    assert [r["exitcode"] for r in d["ranks"]] == [None, None]  # no rank stopped another


def test_options_refused_before_anything_runs(tmp_path: Path) -> None:
    from tracekit.cli import main

    (tmp_path / "t.py").write_text("print('never')\n")
    for extra, words in (
        (["--nproc-per-node", "0"], "--nproc-per-node must be >= 1"),
        (["--nproc-per-node", "2", "--comm-steps", "0"], "--comm-rounds must be >= 0"),
    ):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            argv = ["run", *extra, "-o", str(tmp_path / "o"), "--", str(tmp_path / "t.py")]
            assert main(argv) == 2
        assert words in stderr.getvalue() and stderr.getvalue().count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


# ------------------------------------------------------------ the step-end machinery


class _Control:
    """A stand-in for DDP's no_sync(): records when gradient sync is off."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        self.log.append("off")
        try:
            yield
        finally:
            self.log.append("on")


def test_rounds_over_step_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 rounds x 2 steps: with, with, without, without | without, without, with, with;
    no_sync() entered at the step end that starts a half without sync and left at its
    last step's end; a barrier before every step; each step timed from its barrier."""
    log: list[str] = []
    ctl = commcost.SyncControl("stand-in", _Control(log).off, None)
    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(BoundaryRounds, "_mark", lambda self: next(clock))
    rounds = BoundaryRounds(ctl, lambda: log.append("barrier"), torch.device("cpu"),
                            rounds=2, steps=2)  # fmt: skip
    assert rounds.plan == [True, True, False, False, False, False, True, True]
    ends = [rounds.boundary() for _ in range(9)]  # the schedule's last end + 8 step ends
    assert ends == [False] * 8 + [True] and rounds.done and not rounds.off
    assert log == ["barrier", "barrier", "off", "barrier", "barrier", "barrier", "barrier",
                   "on", "barrier", "barrier"]  # fmt: skip
    got = rounds.measured()
    assert got.with_ms == [[1000.0, 1000.0], [1000.0, 1000.0]] and len(got.without_ms) == 2
    assert rounds.boundary() is True  # further step ends change nothing


def _session(model: Any, *, n: int = 1, complete: bool = False) -> Any:
    return types.SimpleNamespace(n=n, phases=object(), model=model, complete=complete,
                                 finished=complete, device=torch.device("cpu"),
                                 model_absent="none")  # fmt: skip


def test_a_model_that_is_not_ddp_is_skipped() -> None:
    hook = CommHook(0, rounds=2, steps=2)
    model = torch.nn.Linear(2, 2)
    assert hook(_session(model)) is True
    assert hook(_session(model, n=9, complete=True)) is True  # nothing more to run
    assert hook.entry["status"] == "skipped" and hook.entry["ranks"] == []
    assert hook.entry["reason"] == (
        "the model is a Linear, not a DistributedDataParallel (or FSDP2) module"
    )
    zero = CommHook(0, rounds=0, steps=2)
    zero(_session(model))
    zero(_session(model, n=9, complete=True))
    assert (zero.entry["status"], zero.entry["reason"]) == ("skipped", "--comm-rounds 0")


class _Sharded(torch.nn.Module):
    """An FSDP2-like module: it has set_requires_gradient_sync."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.sync: list[bool] = []

    def set_requires_gradient_sync(self, on: bool) -> None:
        self.sync.append(on)


def test_the_whole_measurement_then_the_interconnect_sweep_once() -> None:
    """After the last step of the rounds: the rank's figures, then the sweep (ceilings on),
    once; the step ends after that (``--run-on``) change nothing."""
    sweeps: list[torch.device] = []

    def sweep(device: torch.device) -> dict[str, Any]:
        sweeps.append(device)
        return {"busbw_Bps": 1e9}

    inner = _Sharded()
    hook = CommHook(0, rounds=1, steps=2, barrier=lambda device: lambda: None,
                    interconnect=sweep, run_on=True)  # fmt: skip
    hook(_session(inner))
    done = [hook(_session(inner, n=n, complete=True)) for n in range(4, 12)]
    assert done == [False] * 4 + [True] * 4 and inner.sync == [False, True]
    assert hook.entry["status"] == "ok" and hook.entry["sync_off"] == commcost.FSDP_SYNC_OFF
    fig = hook.entry["ranks"][0]
    assert len(fig["rounds_with_ms"]) == len(fig["rounds_without_ms"]) == 1
    assert sweeps == [torch.device("cpu")] and hook.sweep == {"busbw_Bps": 1e9}
    assert hook.sweep_absent is None
    skipped = CommHook(0, rounds=2, steps=2, interconnect=sweep)
    skipped(_session(torch.nn.Linear(2, 2)))
    skipped(_session(None, n=9, complete=True))
    assert skipped.entry["status"] == "skipped" and len(sweeps) == 2  # measured all the same


def test_the_sync_target_behind_a_wrapper_and_a_loop_that_ends_early() -> None:
    inner = _Sharded()
    wrapper = torch.nn.Module()
    wrapper._orig_mod = inner  # torch.compile's wrapper holds the module there
    assert find_sync_target(wrapper) is inner and parallel_kind(inner) == "fsdp2"
    assert find_sync_target(torch.nn.Linear(2, 2), candidates=[]) is None
    hook = CommHook(1, rounds=2, steps=2, barrier=lambda device: lambda: None)
    hook(_session(wrapper))
    assert hook(_session(None, n=6, complete=True)) is False  # the rounds begin
    for n in (7, 8, 9):  # with, with, then the first step without sync starts
        assert hook(_session(None, n=n, complete=True)) is False
    assert inner.sync == [False]
    hook.ended(9)
    assert inner.sync == [False, True]  # sync back on
    assert hook.entry["status"] == "failed"
    assert hook.entry["reason"] == "the loop ended after 3 of the 8 steps of the measurement"
    early = CommHook(0, rounds=2, steps=2)
    early(_session(wrapper))
    early.ended(5)  # the (fitted) schedule's timed steps end with the loop
    assert (early.entry["status"], early.entry["reason"]) == (
        "failed",
        "the loop ended after 5 steps, before the measurement, whose 8 steps follow the "
        "schedule's last",
    )


def test_metrics_across_ranks() -> None:
    def met(median: float, samples_per_s: float) -> dict[str, Any]:
        return {"step_time_ms": {"median": median}, "samples_per_s": samples_per_s,
                "tokens_per_s": None, "model_flops_per_s": None, "peak_allocated_bytes": None,
                "profiled_step_time": {"median": median * 2}}  # fmt: skip

    m = merge_metrics([met(10.0, 800.0), met(12.5, 640.0)])  # 8 samples per step each
    assert m["slowest_rank"] == 1 and m["step_time_ms"] == {"median": 12.5}
    assert m["samples_per_s"] == pytest.approx(16 / 0.0125)  # both ranks' per slowest step
    assert m["tokens_per_s"] is None and m["tokens_per_s_per_gpu"] is None
    assert m["step_time_skew_pct"] == pytest.approx(25.0)
    assert m["profiled_step_time_ms"] == 25.0 and m["profiler_overhead_pct"] == pytest.approx(100)

"""A rank of ``tracekit collect --gpus N`` runs the passes of one GPU (light timeline pass,
full pass, category step) and measures the communication cost without a profiler.

On CPU the light pass does not run (it records CUDA activity only), which is how a rank
worker whose manifest had no ``profiler`` entry crashed on every GPU run and on no test. Here
the GPU-only piece is stood in (``tests/standins.py``): the pass runs on CPU and records
CPU activity instead of CUDA's, so the rank goes through ``collectors/collect.py``'s
``_profile`` exactly as on a GPU. The rank runs in this process (world size 1, gloo) where
that is enough; the real 2-rank collect (the elastic launcher, its ranks patched by a
``sitecustomize``) is tests/test_collect_multigpu.py's ``ddp_run``."""

from __future__ import annotations

import contextlib
import socket
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tracekit.collectors import commcost
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.passes import (
    CATEGORY_PASS,
    TIMELINE_SUFFIX,
    category_config,
)
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.errors import UsageError

from .standins import stand_in_light_pass


def _cfg(**kw: Any) -> CollectConfig:
    base: dict[str, Any] = dict(
        device="cpu", preset="tiny", batch=2, seq=16, steps=2, warmup=0, gpus=2,
        ceilings=False, quiet=True, comm_rounds=2, comm_steps=2,
        profiler=ProfilerConfig(wait=0, warmup=0, active=1, light_cost_rounds=2),
    )  # fmt: skip
    base.update(kw)
    return CollectConfig(**base)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _one_rank_group(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment of rank 0 of 1 (the launcher's variables); the group the rank
    creates is destroyed after."""
    import torch.distributed as dist

    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}.items():  # fmt: skip
        mp.setenv(k, v)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _rank_result(cfg: CollectConfig, run_dir: Path, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """Rank 0's result after ``collectors/rank.py``'s ``_run`` in this process."""
    from tracekit.collectors.rank import _run

    result: dict[str, Any] = {"rank": 0, "status": "error"}
    run_dir.mkdir(parents=True, exist_ok=True)
    with _one_rank_group(mp):
        _run(cfg, run_dir, 60.0, 0, 0, result)
    return result


# ------------------------------------------------------------ the rank's passes


def test_a_rank_runs_the_light_pass_the_full_pass_and_the_category_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_light_pass(monkeypatch.setattr)
    cfg = _cfg()
    res = _rank_result(cfg, tmp_path, monkeypatch)
    arts = res["artifacts"]
    # the light pass: its trace and step sidecar (no marker kernel on CPU), described
    assert arts["timeline_trace_absent"] is None
    assert arts["timeline_trace"].startswith("rank0.") and arts["timeline_trace"].endswith(
        TIMELINE_SUFFIX
    )
    assert (tmp_path / arts["timeline_trace"]).is_file()
    assert arts["timeline_steps"] and (tmp_path / arts["timeline_steps"]).is_file()
    tl = res["profiler"]["timeline"]
    assert tl["activities"] == ["cuda"] and "sidecar" in tl["step_marker"]
    # the full pass, then the category step (its options cannot export the memory timeline)
    assert arts["trace"].startswith("rank0.") and (tmp_path / arts["trace"]).is_file()
    if arts["memory_timeline"]:
        assert arts["memory_timeline_pass"] == CATEGORY_PASS
    met = res["metrics"]
    assert met["timeline_step_time"]["n"] == 1 and met["profiled_step_time"]["n"] == 1
    assert met["step_time_ms"]["n"] == cfg.steps
    # the light pass's cost in 2 interleaved rounds (its recorder: Kineto's, as it fell back)
    assert met["timeline_cost"]["rounds"] == 2 and met["timeline_cost"]["recorder"] == "kineto-cuda"
    # every phase's steps: warm-up, timed, 2 x rounds x steps unprofiled, light, its cost
    # rounds (2 x 2 windows of 2 settling + 3 timed), full, category
    comm = 2 * cfg.comm_rounds * cfg.comm_steps
    category = category_config(cfg.profiler).steps
    residual = 10  # the residual check after every pass
    assert res["total_steps"] == cfg.warmup + cfg.steps + comm + 1 + 20 + 1 + category + residual
    cost = res["comm_cost"]
    assert cost["status"] == "ok" and cost["sync_off"] == commcost.DDP_SYNC_OFF
    assert cost["caveat"] is None and commcost.HOST_TIMER in cost["method"]
    assert [r["rank"] for r in cost["ranks"]] == [0]


def test_single_pass_rank_says_why_there_is_no_light_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_light_pass(monkeypatch.setattr)
    cfg = _cfg(profiler=ProfilerConfig(wait=0, warmup=0, active=1, timeline_pass=False),
               comm_rounds=0)  # fmt: skip
    res = _rank_result(cfg, tmp_path, monkeypatch)
    assert res["artifacts"]["timeline_trace"] is None
    assert res["artifacts"]["timeline_trace_absent"] == "disabled (--single-pass)"
    assert res["profiler"]["timeline"] is None
    # --comm-rounds 0: skipped, and no step of its own
    assert res["comm_cost"]["status"] == "skipped" and res["comm_cost"]["ranks"] == []
    assert res["comm_cost"]["reason"] == "--comm-rounds 0"
    cat = category_config(cfg.profiler).steps
    assert res["total_steps"] == cfg.warmup + cfg.steps + 1 + cat + 10  # + the residual check


def test_fsdp_rank_measures_with_its_sync_switch_and_caveat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bare = ProfilerConfig(wait=0, warmup=0, active=1, timeline_pass=False, memory_timeline=False,
                          record_shapes=False, profile_memory=False, with_flops=False)  # fmt: skip
    cfg = _cfg(parallel="fsdp", grad_accum=2, steps=1, warmup=0, comm_steps=1, profiler=bare)
    res = _rank_result(cfg, tmp_path, monkeypatch)
    cost = res["comm_cost"]
    assert cost["status"] == "ok" and cost["sync_off"] == commcost.FSDP_SYNC_OFF
    assert cost["caveat"] == commcost.FSDP_CAVEAT and "all-gathers stay" in cost["caveat"]
    assert cost["rounds"] == 2 and cost["steps_per_round"] == 1
    assert len(cost["ranks"][0]["rounds_with_ms"]) == 2


def test_suspended_sync_holds_through_an_accumulating_step() -> None:
    """FSDP2's switch is a setter: the last micro-batch of an accumulating step turns sync
    back on, unless the measurement holds it off."""
    from tracekit.collectors.train import grad_sync, suspend_grad_sync

    calls: list[bool] = []

    class Sharded(torch.nn.Module):
        def set_requires_gradient_sync(self, on: bool) -> None:
            calls.append(on)

    m = Sharded()
    with grad_sync(m, last=True):
        pass
    assert calls == [True]
    calls.clear()
    with suspend_grad_sync(m):
        for j in range(3):
            with grad_sync(m, last=j == 2):
                pass
    assert calls == [False, False, False, False, True]  # on again after the measurement


# ------------------------------------------------------------ the measurement's schedule


def test_rounds_alternate_and_every_step_follows_a_barrier() -> None:
    events: list[str] = []
    state = {"sync": True}

    @contextlib.contextmanager
    def off() -> Iterator[None]:
        state["sync"] = False
        yield
        state["sync"] = True

    def step(i: int) -> None:
        events.append(f"{i}{'w' if state['sync'] else 'o'}")

    def timer(fn: Callable[[], Any]) -> float:
        fn()
        return 10.0 if state["sync"] else 7.0

    got = commcost.measure_rounds(step, off, lambda: events.append("b"), timer,
                                  rounds=3, steps=2, start=5)  # fmt: skip
    assert events[0::2] == ["b"] * 12
    assert events[1::2] == ["5w", "6w", "7o", "8o", "9o", "10o", "11w", "12w",
                            "13w", "14w", "15o", "16o"]  # fmt: skip
    assert got.next_step == 17
    assert got.with_ms == [[10.0, 10.0]] * 3 and got.without_ms == [[7.0, 7.0]] * 3


def test_rank_cost_is_the_median_of_the_rounds_differences() -> None:
    with_ms = [[10.0, 12.0, 11.0], [20.0, 20.0, 20.0], [11.0, 11.0, 11.0]]
    without_ms = [[8.0, 8.0, 8.0], [10.0, 10.0, 10.0], [10.0, 10.0, 9.0]]
    r = commcost.rank_cost(1, with_ms, without_ms)
    assert r["rounds_with_ms"] == [11.0, 20.0, 11.0]
    assert r["rounds_without_ms"] == [8.0, 10.0, 10.0]
    assert r["with_sync_ms"] == 11.0 and r["without_sync_ms"] == 10.0
    assert r["cost_ms"] == statistics.median([3.0, 10.0, 1.0]) == 3.0
    assert r["cost_ms_range"] == [1.0, 10.0]
    assert r["cost_pct"] == pytest.approx(100 * 3.0 / 11.0)


def _entry(rank: int) -> dict[str, Any]:
    control = commcost.SyncControl(commcost.DDP_SYNC_OFF, contextlib.nullcontext, None)
    got = commcost.Rounds([[10.0 + rank]], [[8.0]], 2)
    return commcost.rank_entry(rank, control, commcost.HOST_TIMER, got, rounds=1, steps=1)


def test_combine_gathers_every_rank_or_says_what_is_missing() -> None:
    ok = commcost.combine({1: _entry(1), 0: _entry(0)}, 2, rounds=1, steps=1)
    assert ok["status"] == "ok" and ok["reason"] is None
    assert [r["rank"] for r in ok["ranks"]] == [0, 1]
    assert [r["cost_ms"] for r in ok["ranks"]] == [2.0, 3.0]
    assert ok["sync_off"] == commcost.DDP_SYNC_OFF and "no profiler" in ok["method"]
    failed = commcost.combine({0: _entry(0), 1: None}, 2, rounds=1, steps=1)
    assert failed["status"] == "failed" and failed["reason"] == "no measurement from rank 1"
    assert failed["ranks"] == []
    skip = commcost.block("skipped", "--comm-rounds 0", rounds=0, steps=5)
    skipped = commcost.combine({0: skip, 1: skip}, 2, rounds=0, steps=5)
    assert skipped["status"] == "skipped" and skipped["reason"] == "--comm-rounds 0"


def test_a_model_without_a_sync_switch_is_skipped_not_measured() -> None:
    steps: list[int] = []
    entry, n = commcost.measure(torch.nn.Linear(2, 2), steps.append, torch.device("cpu"),
                                rank=0, rounds=2, steps=2, start=3)  # fmt: skip
    assert entry["status"] == "skipped" and "neither a DDP nor an FSDP2" in entry["reason"]
    assert n == 3 and steps == []


@pytest.mark.parametrize(("flag", "value"), [("--comm-rounds", "-1"), ("--comm-steps", "0")])
def test_bad_comm_options_are_one_line_errors(flag: str, value: str) -> None:
    with pytest.raises(UsageError, match=flag):
        CollectConfig(**{flag.removeprefix("--").replace("-", "_"): int(value)})


def test_the_summary_line_names_each_rank_or_why_there_is_none() -> None:
    from tracekit.collectors.dist_manifest import comm_cost_lines

    ok = commcost.combine({0: _entry(0), 1: _entry(1)}, 2, rounds=1, steps=1)
    (line,) = comm_cost_lines(ok)
    assert line.startswith("communication cost (unprofiled, measured: 1 rounds x 1 steps with")
    assert "rank 0 2.00 ms (20 %, 2.00–2.00) of 10.00 ms; rank 1 3.00 ms (27 %" in line
    skip = commcost.block("skipped", "--comm-rounds 0", rounds=0, steps=5)
    assert comm_cost_lines(skip) == ["communication cost: skipped (--comm-rounds 0)"]
    assert comm_cost_lines(None) == []
    fsdp = dict(ok, caveat=commcost.FSDP_CAVEAT)
    assert comm_cost_lines(fsdp)[1] == f"  caveat: {commcost.FSDP_CAVEAT}"

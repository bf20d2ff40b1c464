"""`tracekit run --counters` and `profile(counters=True)` without a GPU: the ncu command
lines (a fake ncu records them) and the replay opening the CUDA profiler range around the
right step (a fake cudart records the calls)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tracekit.cli import main
from tracekit.collectors import api
from tracekit.collectors import script as S
from tracekit.collectors.session_windows import CountersRange

SCRIPTS = Path(__file__).resolve().parent / "scripts"
FAST = ["--warmup", "2", "--steps", "2", "--profile-wait", "0", "--profile-warmup", "1",
        "--profile-active", "1", "--no-ceilings", "-q"]  # fmt: skip
CSV = (
    '"ID","Kernel Name","Grid Size","Block Size","gpu__time_duration.sum"\n'
    '"","","","","nsecond"\n'
    '"0","k","(1, 1, 1)","(32, 1, 1)","1000"\n'
)


class FakeCudart:
    def __init__(self, log: list[tuple[str, int]], rng: list[CountersRange]) -> None:
        self.log, self.rng = log, rng

    def cudaProfilerStart(self) -> int:
        self.log.append(("start", self.rng[0].n))
        return 0

    def cudaProfilerStop(self) -> int:
        self.log.append(("stop", self.rng[0].n))
        return 0


def test_counters_range_brackets_one_step() -> None:
    log: list[tuple[str, int]] = []
    holder: list[CountersRange] = []
    rng = CountersRange(3, cudart=FakeCudart(log, holder), sync=lambda: log.append(("sync", 0)))
    holder.append(rng)
    for _ in range(5):
        if not rng.complete:
            rng.boundary()
    # opened at the end of step 3 (after a sync), closed at the end of step 4
    assert log == [("sync", 0), ("start", 3), ("sync", 0), ("stop", 4)]
    assert rng.complete and (rng.opened_at, rng.closed_at) == (3, 4)


@pytest.fixture
def mlp_run(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path_factory.mktemp("runs") / "mlp"
    assert main(["run", *FAST, "-o", str(out), "--", "python", str(SCRIPTS / "mlp.py")]) == 0
    capsys.readouterr()
    return out


def test_replay_opens_the_range_around_the_first_timed_step(
    mlp_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    class Rt:
        def cudaProfilerStart(self) -> None:
            calls.append("start")

        def cudaProfilerStop(self) -> None:
            calls.append("stop")

    rng = S.replay_main(mlp_run, cudart=Rt(), sync=lambda: calls.append("sync"))
    # --warmup 2: the range holds step 3 (from the end of step 2 to the end of step 3), the
    # run's first timed step; then the script is stopped
    assert calls == ["sync", "start", "sync", "stop"]
    assert (rng.opened_at, rng.closed_at, rng.n) == (2, 3, 3)
    assert "done" not in capsys.readouterr().out


def _fake_ncu(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "ncu.log"
    ncu = tmp_path / "ncu"
    ncu.write_text(
        "#!/bin/sh\n"
        f'echo "REPLAY=$TRACEKIT_COUNTERS_REPLAY $*" >> {shlex.quote(str(log))}\n'
        'case "$*" in *--query-metrics*) exit 0;; esac\n'
        f"printf '%s' {shlex.quote(CSV)}\n"
    )
    ncu.chmod(0o755)
    return ncu, log


def test_run_counters_command_lines(mlp_run: Path, tmp_path: Path) -> None:
    ncu, log = _fake_ncu(tmp_path)
    entry = S.run_counters(mlp_run, ncu=str(ncu))
    calls = log.read_text().splitlines()
    assert calls[0] == "REPLAY= --query-metrics"  # the device's tensor counters
    first, gemm = calls[1].split(" ", 1)[1], calls[2].split(" ", 1)[1]
    target = f"{sys.executable} -m tracekit.collectors.script --replay {mlp_run.resolve()}"
    for cmd in (first, gemm):
        assert cmd.startswith(
            "--profile-from-start off --clock-control none --target-processes all"
        )
        assert cmd.endswith(target)
    assert "--filter-mode per-launch-config --launch-count 1" in first
    assert "--kernel-name-base demangled --kernel-name regex:" in gemm
    assert "--sample" not in gemm  # every GEMM launch: no block of an unknown model to sample
    m = json.loads((mlp_run / "manifest.json").read_text())
    assert m["artifacts"]["counters"] == "counters.csv" and m["counters"] == entry
    assert entry["profiled_launches"] == 1 and entry["gemm"]["profiled_launches"] == 1
    assert entry["gemm"]["method"] == "the same step replayed again; every GEMM launch"
    assert (mlp_run / "counters.csv").read_text() == CSV


def test_profile_counters_rerun_this_program(tmp_path: Path, mlp_run: Path) -> None:
    ncu, log = _fake_ncu(tmp_path)
    api.run_program_counters(mlp_run, ncu=str(ncu))
    calls = log.read_text().splitlines()
    program = " ".join(api.program_command())
    assert api.program_command()[0] == sys.executable
    assert all(c.startswith("REPLAY=1 ") for c in calls[1:3])
    assert calls[1].endswith(program) and calls[2].endswith(program)


def test_profile_in_the_replay_opens_the_range_and_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class Rt:
        def cudaProfilerStart(self) -> None:
            calls.append(f"start@{prof.steps_done}")

        def cudaProfilerStop(self) -> None:
            calls.append(f"stop@{prof.steps_done}")

    monkeypatch.setenv(api.REPLAY_ENV, "1")
    monkeypatch.setattr(torch.cuda, "cudart", lambda: Rt())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    steps = 0
    with pytest.raises(SystemExit) as ex, api.profile(tmp_path / "p", warmup=3) as prof:
        for _ in range(10):
            steps += 1
            prof.step()
    assert ex.value.code == 0 and steps == 4 and calls == ["start@3", "stop@4"]
    assert not (tmp_path / "p").exists()  # the replay writes no run folder


def test_counters_pass_env_is_only_the_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(run_dir: Path, **kw: Any) -> dict[str, Any]:
        seen.update(kw)
        return {}

    import tracekit.collectors.replay as replay

    monkeypatch.setattr(replay, "run_counters", fake)
    api.run_program_counters(Path("r"))
    assert seen["env"] == {api.REPLAY_ENV: "1"} and seen["target"] == api.program_command()
    assert os.environ.get(api.REPLAY_ENV) is None

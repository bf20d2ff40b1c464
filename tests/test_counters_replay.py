"""The ncu replay runner, with a stand-in ncu (the real one needs a GPU)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tracekit.collectors.replay import COUNTERS_CSV, _csv_part, ncu_command, run_counters
from tracekit.errors import DeviceError, TracekitError

CSV = (
    '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n'
    '"","","","","nsecond"\n'
    '"0","ampere_sgemm_64x32_nn","(128, 1, 1)","(4, 2, 1)","5120"\n'
)


def _fake_ncu(tmp: Path, body: str) -> Path:
    exe = tmp / "ncu"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_command_profiles_each_launch_configuration_once(tmp_path: Path) -> None:
    cmd = ncu_command(tmp_path, ["a.sum", "b.sum"])
    joined = " ".join(cmd)
    for flag in (
        "--profile-from-start off",
        "--clock-control none",
        "--filter-mode per-launch-config",
        "--launch-count 1",
        "--csv",
        "--metrics a.sum,b.sum",
    ):
        assert flag in joined
    assert cmd[-3:] == ["-m", "tracekit.collectors.replay", str(tmp_path)]


def test_csv_part_drops_ncu_and_program_output() -> None:
    out = "==PROF== Connected\nhello from the program\n" + CSV + "==PROF== Disconnected\n"
    assert _csv_part(out) == CSV


def test_run_counters_writes_csv_and_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {"trace": "t.json.gz"}}))
    exe = _fake_ncu(tmp_path, f"echo '==PROF== Connected'\ncat <<'EOF'\n{CSV}EOF\n")
    entry = run_counters(tmp_path, ["gpu__time_duration.sum"], ncu=str(exe))
    assert (tmp_path / COUNTERS_CSV).read_text() == CSV
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["artifacts"]["counters"] == COUNTERS_CSV and m["counters"] == entry
    assert entry["profiled_launches"] == 1 and m["artifacts"]["trace"] == "t.json.gz"


def test_run_counters_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(DeviceError, match="no 'ncu' on PATH"):
        run_counters(tmp_path, ["x.sum"])
    exe = _fake_ncu(tmp_path, "echo '==ERROR== ERR_NVGPUCTRPERM' >&2\nexit 1\n")
    with pytest.raises(TracekitError, match="ERR_NVGPUCTRPERM"):
        run_counters(tmp_path, ["x.sum"], ncu=str(exe))
    assert not (tmp_path / COUNTERS_CSV).exists()

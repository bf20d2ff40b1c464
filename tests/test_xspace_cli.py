"""`tracekit export-xspace` parses arguments and calls the exporter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tracekit.parse
from tests._xspace_data import make_trace
from tracekit.cli import main
from tracekit.xspace import line_summary, read_xspace


@pytest.fixture
def fake_load(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    seen: list[Path] = []

    def load(path: Any) -> Any:
        seen.append(Path(path))
        trace = make_trace()
        trace.path = Path(path)
        return trace

    monkeypatch.setattr(tracekit.parse, "load", load, raising=False)
    return seen


def test_export_xspace_command(
    fake_load: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "gpt.pt.trace.json.gz"
    trace.write_bytes(b"")
    logdir = tmp_path / "tb"
    assert main(["export-xspace", str(trace), "--logdir", str(logdir), "--run", "exp1"]) == 0
    out = capsys.readouterr().out
    path = logdir / "plugins" / "profile" / "exp1" / "localhost.xplane.pb"
    assert f"wrote {path}" in out
    assert "3 GPU stream line(s) with 7 GPU events" in out
    assert f"tensorboard --logdir {logdir}" in out
    assert fake_load == [trace]
    assert line_summary(read_xspace(path))["events"].sum() > 0


def test_export_xspace_defaults(fake_load: list[Path], tmp_path: Path) -> None:
    trace = tmp_path / "gpt.pt.trace.json.gz"
    trace.write_bytes(b"")
    assert main(["export-xspace", str(trace), "--host", "node7"]) == 0
    assert (tmp_path / "tensorboard" / "plugins" / "profile" / "gpt" / "node7.xplane.pb").is_file()


def test_export_xspace_bad_run_name(
    fake_load: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(b"")
    assert main(["export-xspace", str(trace), "--run", "a/b"]) == 2
    assert capsys.readouterr().err.startswith("tracekit: error: invalid run name")

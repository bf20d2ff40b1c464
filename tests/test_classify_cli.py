"""`tracekit classify` end to end on a hand-built trace (the parser is stubbed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracekit.analyse
from tests._synth import Builder
from tracekit.classify.output import default_out
from tracekit.cli import main

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


def _trace():  # type: ignore[no-untyped-def]
    b = Builder()
    mm = b.op("aten::mm", dims=[[1024, 1024], [1024, 1024]], types=["c10::BFloat16"] * 2)
    b.kernel(GEMM, mm, 20_000)
    return b.trace()


@pytest.fixture
def fake_load(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def load(path: str):  # type: ignore[no-untyped-def]
        calls.append(path)
        return _trace()

    monkeypatch.setattr(tracekit.analyse, "load", load)  # the pipeline parses
    return calls


def test_classify_command_writes_tables(
    tmp_path: Path, fake_load: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.pt.trace.json.gz"
    trace.write_bytes(b"stub")
    assert main(["classify", str(trace)]) == 0
    out = tmp_path / "run.pt.trace.classify"
    assert default_out(trace) == out
    names = {p.name for p in out.iterdir()}
    assert names >= {
        "op_roofline.parquet",
        "kernel_roofline.parquet",
        "classes.parquet",
        "step_summary.parquet",
        "device.parquet",
        "classify.json",
    }
    text = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in text and "gemm 100.0%" in text
    summary = json.loads((out / "classify.json").read_text())
    assert summary["classes"][0]["class"] == "gemm"


def test_flags_and_output_folder(tmp_path: Path, fake_load: list[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert (
        main(
            [
                "classify",
                str(run),
                "-o",
                str(tmp_path / "x"),
                "--peak-tflops",
                "100",
                "--bandwidth",
                "1000",
            ]
        )
        == 0
    )
    assert default_out(run) == run / "classify"
    summary = json.loads((tmp_path / "x" / "classify.json").read_text())
    assert any("--peak-tflops not used" in n for n in summary["notes"])


def test_bad_input_is_a_one_line_error(
    tmp_path: Path, fake_load: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["classify", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.endswith("missing.json: no such file or folder\n") and err.count("\n") == 1
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    assert main(["classify", str(trace), "--peak-tflops", "-5"]) == 2
    assert main(["classify", str(trace), "--counters", str(tmp_path / "nope.csv")]) == 2


def test_a_cpu_run_is_classified_in_cpu_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35: `classify` reads a CPU run through the pipeline's CPU view; its summary
    says whose time the shares are of (the CPU's operators), not GPU time."""
    import shutil

    run = tmp_path / "cpu"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "cpu-tiny-fp32-naive", run)
    assert main(["classify", str(run)]) == 0
    out = capsys.readouterr().out
    assert "CPU time by class: gemm" in out and "of the analysed steps' CPU time" in out
    assert "GPU time" not in out

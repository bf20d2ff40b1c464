"""tracekit report: every output, escaping, 80-column terminal, TensorBoard read back."""

from __future__ import annotations

import gzip
import html as htmlmod
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from tensorboard.backend.event_processing import event_accumulator as ea

import tracekit.analyse as pipeline
import tracekit.commands.report as report_mod
import tracekit.reports.html as html
from tracekit.cli import main
from tracekit.commands.report import report
from tracekit.parse import load
from tracekit.reports import plots, tbtrace, terminal
from tracekit.reports.render import ReportResult, render

from . import contract
from . import reportgen as rg
from . import tracegen as tg

REPORT_FILES = {
    "summary.json",
    "report.html",
    "plots/time_share.png",
    "plots/roofline.png",
    "plots/memory_timeline.png",
    "classes.parquet",
    "operators.parquet",
    "kernels.parquet",
    "steps.parquet",
}


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return tg.write(rg.report_trace(), tmp_path / "host_42.1700000000.pt.trace.json.gz")


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report command with tests/contract.py in place of the classify stage."""
    monkeypatch.setattr(
        pipeline, "classify_trace", lambda trace, *a, **kw: contract.classification(trace)
    )


def _run(path: Path, **kw: Any) -> ReportResult:
    return report(path, classification=contract.classification(load(path)), **kw)


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> ReportResult:
    """One report of the synthetic trace, with the defaults, for the tests that only read
    what it wrote and returned."""
    trace = tmp_path_factory.mktemp("reported") / "host_42.1700000000.pt.trace.json.gz"
    return _run(tg.write(rg.report_trace(), trace))


def test_outputs_and_default_location(reported: ReportResult) -> None:
    res = reported
    out = res.out.with_name("host_42.1700000000.report")  # beside the trace, named after it
    assert res.out == out and out.with_name("host_42.1700000000.pt.trace.json.gz").is_file()
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == REPORT_FILES
    assert res.events is None and res.plugin_trace is None  # a trace file: no TensorBoard

    def no_nan(c: str) -> None:
        raise AssertionError(f"summary.json is not strict JSON: {c}")

    doc = json.loads((out / "summary.json").read_text(), parse_constant=no_nan)
    assert doc["format"] == "tracekit.summary" and doc["version"] == 2
    for key in ("softmax", "layernorm", "gemm"):
        assert key in doc["time_share_pct"]
    assert set(doc["bound_time_share_pct"]) >= {"memory-bound", "compute-bound"}
    assert set(doc["memory"]) >= {
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "avg_allocated_bytes",
    }
    for key in ("flop_share_pct", "step_time_ms", "gpu_idle_pct", "device", "sources"):
        assert key in doc
    assert doc["device"]["name"] == "NVIDIA H100 80GB HBM3"
    classes = pd.read_parquet(out / "classes.parquet")
    assert list(classes["class"][:3]) == ["softmax", "layernorm", "gemm"]
    assert classes["gpu_time_ns"].sum() == rg.TOTAL_US * 1000
    ops = pd.read_parquet(out / "operators.parquet")
    assert rg.HOSTILE_OP in set(ops["name"])
    for png in (out / "plots").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_shares_match_parquet_and_independent_sum(
    reported: ReportResult,
) -> None:
    res = reported
    k = contract.classification(
        load(res.out.with_name("host_42.1700000000.pt.trace.json.gz"))
    ).kernels
    total = k["dur"].sum()
    doc = json.loads((res.out / "summary.json").read_text())
    for cls, d in k.groupby("class")["dur"].sum().items():
        assert doc["time_share_pct"][cls] == pytest.approx(100 * d / total, abs=0.1)


def test_render_writes_what_it_is_handed(reported: ReportResult, tmp_path: Path) -> None:
    """The renderer alone, on the summary the command computed: the same files, byte for
    byte (it analyses nothing, so it needs nothing but the summary), and TensorBoard where
    it is asked for."""
    res = render(reported.summary, tmp_path / "again", tensorboard=tmp_path / "tb" / "run")
    assert _files(res) == _files(reported)
    assert res.events is not None and res.events.is_relative_to(tmp_path / "tb" / "run")
    assert set(res.timings) >= {"plots", "write", "tensorboard"}


def test_html_escapes_every_trace_string(reported: ReportResult) -> None:
    res = reported
    page = (res.out / "report.html").read_text()
    # the hostile names appear, escaped, and never as markup
    assert htmlmod.escape(rg.HOSTILE, quote=True) in page
    assert htmlmod.escape(rg.HOSTILE_OP, quote=True) in page
    assert "<script" not in page.lower() and "<img src=x" not in page
    assert "onerror=alert" not in page.replace("onerror=alert(2)&gt;", "")
    # self-contained: the three plots inline, nothing fetched
    assert page.count('src="data:image/png;base64,') == 3
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "default-src 'none'" in page  # CSP: even a markup bug could not load anything


def _console_text(sm: Any) -> str:
    c = Console(width=80, record=True, color_system=None, force_terminal=False)
    terminal.render(sm, c, ["wrote somewhere"])
    return c.export_text()


def test_terminal_fits_80_columns(reported: ReportResult) -> None:
    res = reported
    text = _console_text(res.summary)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    # names are cut to fit, but rows never wrap: one line per kernel in the top-kernel table
    top = lines.index(next(x for x in lines if x.startswith("Top kernels")))
    end = next((i for i, x in enumerate(lines) if x.startswith("Critical path")), len(lines))
    body = [x for x in lines[top + 3 : end] if x.strip() and not x.startswith("note:")]
    assert len([x for x in body if "%" in x]) == 9 - 1  # 9 activities, the add_ twice
    # rich markup in a trace string is printed literally, not interpreted
    assert "[bold red]" in text or "<script>alert(1)</script>& [" in text
    assert "softmax" in text and "layernorm" in text and "gemm" in text
    for section in (
        "GPU time per class",
        "Roofline: top operators",
        "Memory",
        "Top allocating operators",
        "GPU utilisation",
        "verdict    launch/host-bound (0.100 ms step, profiled)",
        "Critical path",
    ):
        assert section in text
    # the first screen's labels share one column width: every text starts in column 11
    for label in ("device", "steps", "step time", "profiler", "verdict", "bandwidth", "memory"):
        line = next(x for x in lines if x.startswith(label + " "))
        assert len(line) - len(line[len(label) :].lstrip()) == terminal.LABEL + 1, line
    # the launch-bound warning says what the verdict says: printed once, as the verdict
    assert "warning: launch-bound" not in text


def test_terminal_markup_never_interpreted(reported: ReportResult) -> None:
    res = reported
    c = Console(width=200, record=True, color_system="truecolor", force_terminal=True)
    terminal.render(res.summary, c)
    assert "[bold red]x[/bold red]" in c.export_text(styles=False)


def test_cli_json_and_text(
    trace_file: Path, stand_in: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = trace_file.parent / "rep"
    assert main(["report", str(trace_file), "-o", str(out), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "summary.json").read_text())
    assert main(["report", str(trace_file), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GPU time per class" in text and f"wrote {out}/" in text
    assert main(["report", str(trace_file), "--format", "xml"]) == 2
    assert "--format must be" in capsys.readouterr().err
    assert main(["report", str(trace_file.parent / "missing.json")]) == 2


def test_console_entry_point_ends_without_losing_output(trace_file: Path) -> None:
    """`tracekit report` ends the process right after its output (no interpreter
    teardown): everything printed to a pipe and written to disk must still be there. Other
    endings freeze the objects first (tracekit.io.freeze_before_exit)."""
    root = Path(__file__).resolve().parents[1]
    out = trace_file.parent / "rep"
    code = (  # this checkout's tracekit.reports, as in test_layering
        "import sys, importlib.util\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "import tracekit\n"
        "spec = importlib.util.spec_from_file_location('tracekit.reports', "
        f"{str(root / 'reports' / '__init__.py')!r}, "
        f"submodule_search_locations=[{str(root / 'reports')!r}])\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "sys.modules['tracekit.reports'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "import atexit, gc\n"
        "atexit.register(lambda: print('teardown ran, frozen', gc.get_freeze_count() > 0))\n"
        "from tracekit.cli import run\n"
        f"sys.argv = ['tracekit', 'report', {str(trace_file)!r}, '-o', {str(out)!r}]\n"
        "run()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "GPU time per class" in r.stdout and r.stdout.rstrip().endswith("summary.json")
    assert "teardown ran" not in r.stdout  # ended without the interpreter's teardown
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == REPORT_FILES
    bad = subprocess.run(
        [sys.executable, "-c", code.replace(str(trace_file), str(trace_file) + ".missing")],
        capture_output=True,
        text=True,
        cwd=root,
    )
    # errors exit normally, without the collector's walk over what was imported
    assert bad.returncode == 2 and "teardown ran, frozen True" in bad.stdout


def test_failed_report_leaves_earlier_one(
    trace_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _run(trace_file)
    before = (res.out / "summary.json").read_bytes()

    def boom(*a: Any) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(html, "render", boom)
    with pytest.raises(RuntimeError):
        _run(trace_file)
    assert (res.out / "summary.json").read_bytes() == before
    assert not [p for p in res.out.parent.iterdir() if p.name.startswith(".")]


# --------------------------------------------------------------------------- TensorBoard


def _accumulator(run_dir: Path) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(
        str(run_dir), size_guidance={ea.SCALARS: 0, ea.IMAGES: 0, ea.TENSORS: 0}
    )
    acc.Reload()
    return acc


def test_tensorboard_events_read_back(trace_file: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    res = _run(trace_file, tensorboard=logdir)
    run_dir = logdir / "host_42.1700000000"
    assert res.events is not None and res.events.parent == run_dir
    acc = _accumulator(run_dir)
    tags = acc.Tags()
    sc = {t: {e.step: e.value for e in acc.Scalars(t)} for t in tags["scalars"]}
    # step 2: add_ 4 + softmax 6 + layernorm 8 + hostile 1 = 19 µs of GPU time
    assert sc["time_share_pct/softmax"][2] == pytest.approx(100 * 6 / 19)
    assert sc["time_share_pct/gemm"][1] == pytest.approx(100 * 9 / 14)
    assert sc["gpu_ms/layernorm"][2] == pytest.approx(0.008)
    assert sc["step_time_ms"] == pytest.approx({1: 0.1, 2: 0.1})
    assert sc["gpu_idle_pct"][2] == pytest.approx(81.0)
    assert sc["memory/peak_allocated_bytes"] == {1: 4096.0, 2: 11264.0}
    # memory timeline: one point per [memory] event, x = µs since the trace start
    assert sc["memory_timeline/allocated_bytes"] == {
        13: 4096.0,
        115: 3072.0,
        151: 11264.0,
        172: 3072.0,
    }
    assert "tokens_per_s" not in sc  # no batch x seq without a manifest
    # step summary per step over the profiled 0.1 ms steps: contract.OPS bytes of each step
    # (step 1: addmm 11392 + mm 11264 + sum 8320 + copy_ 4096; step 2: add_ 12288 +
    # softmax 8192 + layernorm 8320, the hostile kernel has none)
    assert sc["step_summary/bandwidth_used"] == pytest.approx({1: 35072 / 1e-4, 2: 28800 / 1e-4})
    assert sc["step_summary/profiled/bandwidth_used"] == pytest.approx(
        {1: (35072 + 28800) / 2 / 1e-4}
    )
    assert sc["step_summary/bandwidth_utilisation_pct"][1] == pytest.approx(
        100 * 35072 / 1e-4 / contract.BANDWIDTH
    )
    assert sc["memory/dynamic_peak_bytes"] == {1: 8192.0}  # above the 3072-byte floor
    assert set(tags["images"]) == {"plots/time_share", "plots/roofline", "plots/memory_timeline"}
    img = acc.Images("plots/roofline")[0]
    assert img.encoded_image_string[:4] == b"\x89PNG" and img.width == 900
    texts = {t for t in tags["tensors"]}
    assert {
        "report/summary",
        "report/classes",
        "report/operators",
        "report/kernels",
        "report/allocators",
    } <= texts
    md = acc.Tensors("report/kernels")[0].tensor_proto.string_val[0].decode()
    assert "&lt;script&gt;" in md and "<script>" not in md and r"\|" in md
    # the profiler-plugin copy sits beside the events, under the plugin's file pattern
    assert res.plugin_trace is not None
    assert res.plugin_trace.path == run_dir / "host_42.1700000000.pt.trace.json.gz"


def test_tensorboard_rerun_replaces_own_events(trace_file: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    run_dir = logdir / "host_42.1700000000"
    run_dir.mkdir(parents=True)
    foreign = run_dir / "events.out.tfevents.1.other.host"
    foreign.write_bytes(b"")
    _run(trace_file, tensorboard=logdir)
    _run(trace_file, tensorboard=logdir)
    ours = list(run_dir.glob("events.out.tfevents.*.tracekit"))
    assert len(ours) == 1 and foreign.exists()
    assert not [p for p in logdir.iterdir() if p.name.startswith(".")]


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_plugin_copy_rewrites_categories_only(tmp_path: Path, block: int) -> None:
    doc = rg.report_trace()
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cuda_driver",
            "name": "cuLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 1,
            "args": {},
        }
    )
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": 'x "cat": "cuda_runtime"',
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 1,
            "args": {},
        }
    )
    src = tg.write(doc, tmp_path / "w.json", indent=None)
    res = tbtrace.plugin_copy(src, tmp_path / "out", block=block)
    assert res.path.name == "w.pt.trace.json.gz"
    got = _events(res.path)
    want = doc["traceEvents"]
    assert len(got) == len(want)
    n = 0
    for a, b in zip(got, want, strict=True):
        if b.get("cat") in ("cuda_runtime", "cuda_driver"):
            assert a["cat"] == "runtime"
            a = {**a, "cat": b["cat"]}
            n += 1
        assert a == b
    assert res.rewritten == n == 5 + 3 + 1  # 5 + 3 launches in reportgen, 1 driver call
    # a string that merely contains the pattern is left alone
    assert any(e["name"] == 'x "cat": "cuda_runtime"' for e in got)


def test_plugin_names() -> None:
    assert tbtrace.plugin_name(Path("h_1.123.pt.trace.json")) == "h_1.123.pt.trace.json.gz"
    assert tbtrace.plugin_name(Path("h_1.pt.trace.json.gz")) == "h_1.pt.trace.json.gz"
    assert tbtrace.plugin_name(Path("trace.json")) == "trace.pt.trace.json.gz"
    assert tbtrace.plugin_name(Path("x.json.gz")) == "x.pt.trace.json.gz"


# --------------------------------------------------------------------------- run folders


def _run_folder(tmp_path: Path, trace_doc: dict[str, Any]) -> Path:
    run = tmp_path / "gpt2-small-b8-s128-fp32-naive"
    run.mkdir()
    tg.write(trace_doc, run / "host_9.1700000000000.pt.trace.json.gz")
    t0_us = tg.T0
    n = 50
    tl = {
        "format": "tracekit.memory_timeline",
        "version": 1,
        "device": "cuda:0",
        "time_unit": "us",
        "categories": ["parameter", "activation", "gradient"],
        "times_us": [t0_us + 4 * i for i in range(n)],
        "bytes": [[1000, 100 * i, 50 * (i % 5)] for i in range(n)],
    }
    (run / "host_9.1700000000000.memory_timeline.json.gz").write_bytes(
        gzip.compress(json.dumps(tl).encode())
    )
    manifest = {
        "schema_version": 1,
        "status": "ok",
        "config": {
            "preset": "gpt2-small",
            "batch": 8,
            "seq": 128,
            "dtype": "fp32",
            "attention": "naive",
            "compile": False,
            "device": "cuda",
        },
        "model": {"n_params": 124475904},
        "versions": {"torch": "2.11.0+cu128"},
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"},
        "metrics": {
            "step_time_ms": {"median": 41.5},
            "tokens_per_s": 24675.0,
            "peak_allocated_bytes": 5e9,
            "peak_reserved_bytes": 6e9,
            "avg_allocated_bytes": 4e9,
        },
        "artifacts": {
            "trace": "host_9.1700000000000.pt.trace.json.gz",
            "memory_timeline": "host_9.1700000000000.memory_timeline.json.gz",
            "tensorboard": "tensorboard",
        },
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "tensorboard").mkdir()
    return run


def test_run_folder(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, rg.report_trace())
    res = _run(run)
    assert res.out == run / "report"
    doc = json.loads((run / "report" / "summary.json").read_text())
    assert doc["config"]["batch"] == 8 and doc["versions"]["torch"] == "2.11.0+cu128"
    assert doc["tokens_per_step"] == 1024
    assert doc["tokens_per_s"] == pytest.approx(1024 / 0.1e-3)  # trace step time 0.1 ms
    assert doc["measured_tokens_per_s"] == 24675.0 and doc["measured_step_time_ms"] == 41.5
    # dynamic memory only: the 8192-byte allocation above the 3072-byte floor, per token
    assert doc["memory"]["floor_allocated_bytes"] == 3072
    assert doc["memory"]["dynamic_peak_bytes"] == 8192
    assert doc["memory"]["activation_bytes_per_token"] == 8192 / 1024
    assert doc["memory"]["categories"] is True
    assert res.summary.categories is not None and res.summary.categories.offset_ns == -tg.T0 * 1000
    # TensorBoard by default into the run's logdir, under the run's name
    tb_run = run / "tensorboard" / run.name
    assert res.events is not None and res.events.parent == tb_run
    assert (tb_run / "host_9.1700000000000.pt.trace.json.gz").is_file()
    sc = _accumulator(tb_run)
    assert {e.step: e.value for e in sc.Scalars("tokens_per_s")}[2] == pytest.approx(1024 / 1e-4)
    # the per-category timeline, x = µs since the trace start (the export is aligned)
    act = {e.step: e.value for e in sc.Scalars("memory_category/activation")}
    assert act == {4 * i: 100.0 * i for i in range(50)}
    # at the timeline's peak (row 49), mapped onto the model's categories; "other" holds
    # the allocator's 11264-byte peak beyond the timeline's 6100 bytes
    assert doc["memory"]["peak_by_category"] == {"parameter": 1000, "activation": 4900,
                                                 "gradient": 200}  # fmt: skip
    assert doc["memory"]["peak_by_model_category"] == {
        "parameters": 1000, "gradients": 200, "optimizer_state": 0, "activations": 4900,
        "other": 11264 - 6100,
    }  # fmt: skip
    # the unprofiled 41.5 ms step decides the verdict's shares
    assert doc["step_summary"]["basis"] == "unprofiled"
    assert doc["step_summary"]["step_time_ms"] == 41.5
    assert sc.Scalars("measured/tokens_per_s")[0].value == 24675.0
    page = (run / "report" / "report.html").read_text()
    assert "gpt2-small" in page and "2.11.0+cu128" in page
    verdict = doc["step_summary"]["verdict"]
    assert "<h2>Verdict and step summary</h2>" in page and f"<b class='v'>{verdict} (" in page
    assert "timeline category" in page  # memory by category at the peak


def test_run_folder_without_memory_events_uses_manifest(tmp_path: Path) -> None:
    doc = rg.report_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
    run = _run_folder(tmp_path, doc)
    res = _run(run, no_tensorboard=True)
    m = json.loads((res.out / "summary.json").read_text())["memory"]
    assert m["peak_allocated_bytes"] == 5e9 and m["avg_allocated_bytes"] == 4e9
    assert "manifest" in json.loads((res.out / "summary.json").read_text())["sources"]["memory"]
    assert res.events is None and not list((run / "tensorboard").iterdir())
    assert "profile_memory off" in " ".join(res.summary.header.missing)


# --------------------------------------------------------------------------- Chromium


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_html_renders_in_chromium_without_injected_markup(
    reported: ReportResult,
) -> None:
    res = reported
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--dump-dom",
            (res.out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "tracekit report" in dom and "Roofline" in dom
    assert "<script" not in dom.lower() and '<img src="x"' not in dom
    assert dom.count("data:image/png;base64,") == 3


def test_profiler_plugin_sees_gpu_time_only_in_the_copy(tmp_path: Path) -> None:
    """With torch-tb-profiler installed: its parser links no kernel to an operator on a
    current trace (0 device time) and does on tracekit's copy."""
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData

    src = tg.write(rg.report_trace(), tmp_path / "w.pt.trace.json.gz")
    copy = tbtrace.plugin_copy(src, tmp_path / "tb")

    def device_us(path: Path) -> float:
        prof = RunProfileData.parse("w", None, str(path), str(tmp_path / "cache"))
        return float(sum(o.device_duration for o in prof.op_list_groupby_name))

    assert device_us(src) == 0.0
    assert device_us(copy.path) > 0.0


def test_parsed_folder_input(trace_file: Path, tmp_path: Path) -> None:
    from tracekit.parse import parse_to_dir

    parsed = parse_to_dir(trace_file, tmp_path / "parsed").out
    res = _run(parsed)
    assert res.out == parsed / "report" and res.events is None
    doc = json.loads((res.out / "summary.json").read_text())
    assert doc["time_share_pct"]["layernorm"] == pytest.approx(100 * 8 / 33)
    # with a logdir: events, but no trace file to copy for the profiler plugin
    res = _run(parsed, out=tmp_path / "o2", tensorboard=tmp_path / "tb")
    assert res.events is not None and res.plugin_trace is None


def _files(res: ReportResult) -> dict[str, bytes]:
    return {str(p.relative_to(res.out)): p.read_bytes() for p in res.files}


def test_plot_worker_writes_the_same_report(trace_file: Path, tmp_path: Path) -> None:
    spawned: list[plots.PlotWorker] = []

    class Spy(plots.PlotWorker):
        def __init__(self) -> None:
            super().__init__()
            spawned.append(self)

    in_process = _run(trace_file, out=tmp_path / "a", plot_worker=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "PlotWorker", Spy)
        mp.setattr(report_mod, "WORKER_ROWS", 1)  # a large trace: the worker by default
        mp.setattr(report_mod, "_cores", lambda: 2)
        worker = _run(trace_file, out=tmp_path / "b")
        mp.setattr(report_mod, "_cores", lambda: 1)  # but not on one core
        _run(trace_file, out=tmp_path / "c")
    assert len(spawned) == 1 and spawned[0]._proc is None  # used, and ended
    assert set(_files(worker)) == REPORT_FILES
    assert _files(worker) == _files(in_process)  # byte for byte, plots and HTML included
    assert worker.timings["plots"] >= 0 and worker.timings["write"] >= 0


def test_plot_worker_that_cannot_start_or_dies_is_replaced(
    trace_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sm = _run(trace_file, out=tmp_path / "a", plot_worker=False).summary
    expected = plots.all_plots(sm)
    with monkeypatch.context() as mp:
        mp.setattr(sys, "executable", str(tmp_path / "no-python"))
        with plots.PlotWorker() as w:
            for name in plots.NAMES:
                w.submit(name, plots.DATA[name](sm))
            assert {n: w.result(n) for n in plots.NAMES} == expected
    with plots.PlotWorker() as w:
        assert w._proc is not None
        w._proc.kill()
        w._proc.wait()
        for name in plots.NAMES:
            w.submit(name, plots.DATA[name](sm))
        assert {n: w.result(n) for n in plots.NAMES} == expected


def test_plot_worker_takes_data_larger_than_a_pipe_at_once(trace_file: Path) -> None:
    sm = _run(trace_file, plot_worker=False).summary
    data = {**plots.memory_timeline_data(sm), "ballast": np.zeros(1_000_000)}  # 8 MB
    with plots.PlotWorker() as w:
        assert w._proc is not None
        os.kill(w._proc.pid, signal.SIGSTOP)  # a worker that reads nothing yet
        try:
            w.submit("memory_timeline", data)  # returns all the same: a thread sends it
        finally:
            os.kill(w._proc.pid, signal.SIGCONT)
        assert w.result("memory_timeline") == plots.memory_timeline(sm)


def test_plot_worker_error_is_raised_as_in_process(tmp_path: Path) -> None:
    with plots.PlotWorker() as w:
        w.submit("time_share", {"classes": ["gemm"]})  # no shares: a KeyError when drawn
        with pytest.raises(KeyError):
            w.result("time_share")

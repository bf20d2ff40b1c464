"""tracekit collect on CPU: the run folder, its manifest, validation, OOM and atomicity."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tracekit.collectors.collect as collect_mod
import tracekit.collectors.runsummary as runsummary
from tracekit.cli import main
from tracekit.collectors.ceilings import CeilingSizes, measure_ceilings
from tracekit.collectors.config import CollectConfig
from tracekit.collectors.gpt import GPT, PRESETS, GPTConfig, count_params
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.collectors.train import build_workload, make_batches, percentile, run_steps
from tracekit.errors import OutOfMemoryError, TracekitError, UsageError

TINY = ["--device", "cpu", "--preset", "tiny", "--batch", "2", "--seq", "32"]
FAST = [*TINY, "--steps", "3", "--warmup", "1", "--quiet"]


def _cfg(out: Path, **kw: Any) -> CollectConfig:
    base: dict[str, Any] = dict(
        preset="tiny", device="cpu", batch=2, seq=32, steps=2, warmup=1, quiet=True,
        ceilings=False, out=out,
    )  # fmt: skip
    base.update(kw)
    return CollectConfig(**base)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------------------- model


@pytest.mark.parametrize(
    "kw",
    [
        {"n_embd": 65, "n_head": 4},
        {"n_layer": 0},
        {"vocab_size": -1},
        {"dropout": 1.0},
        {"mlp_ratio": 0.0},
        {"attention": "flash"},
        {"block_size": 2.5},
    ],
)
def test_gptconfig_rejects_invalid(kw: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        PRESETS["tiny"].replace(**kw)


@pytest.mark.parametrize(
    "cfg",
    [
        PRESETS["tiny"],
        PRESETS["tiny"].replace(tie_embeddings=False),
        PRESETS["tiny"].replace(bias=False, mlp_ratio=2.5, n_layer=3),
    ],
)
def test_param_count_matches_numel(cfg: GPTConfig) -> None:
    model = GPT(cfg)
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())


def test_gpt2_small_size() -> None:
    # nanoGPT's 124M GPT-2 with the padded 50304 vocabulary.
    assert count_params(PRESETS["gpt2-small"]) == 124_475_904


def test_naive_and_sdpa_attention_agree() -> None:
    cfg = PRESETS["tiny"]
    idx = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(3))
    tgt = torch.roll(idx, -1, dims=1)
    losses, grads = [], []
    for attention in ("naive", "sdpa"):
        torch.manual_seed(0)
        model = GPT(cfg.replace(attention=attention))  # same seed -> same weights
        loss = model(idx, tgt)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.blocks[0].attn.c_attn.weight.grad.clone())
    assert math.isclose(losses[0], losses[1], rel_tol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
    # and the loss is that of a near-uniform prediction over the vocabulary
    assert abs(losses[0] - math.log(cfg.vocab_size)) < 0.5


def test_naive_attention_is_causal() -> None:
    torch.manual_seed(0)
    model = GPT(PRESETS["tiny"]).eval()
    idx = torch.randint(0, 512, (1, 16))
    changed = idx.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 512
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


# ------------------------------------------------------------------ config + helpers


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"batch": 0}, "--batch"),
        ({"seq": 129}, "exceeds the context"),
        ({"preset": "gpt5"}, "unknown preset"),
        ({"dtype": "fp8"}, "--dtype"),
        ({"attention": "flash"}, "--attention"),
        ({"device": "tpu"}, "--device"),
        ({"steps": 0}, "--steps"),
        ({"layers": 0}, "--layers"),
        ({"data": Path("/nonexistent/file.txt")}, "no such file"),
    ],
)
def test_collect_config_rejects(tmp_path: Path, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _cfg(tmp_path / "r", **kw)


def test_data_needs_a_byte_vocabulary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 8)  # 96 bytes
    CollectConfig(preset="tiny", device="cpu", data=text, seq=32)  # 512 >= 256: fine
    with pytest.raises(UsageError, match="needs at least"):
        CollectConfig(preset="tiny", device="cpu", data=text, seq=128)
    monkeypatch.setitem(PRESETS, "tiny", PRESETS["tiny"].replace(vocab_size=200))
    with pytest.raises(UsageError, match="bytewise"):
        CollectConfig(preset="tiny", device="cpu", data=text, seq=32)


def test_text_data_batches_are_shifted_file_windows(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    payload = bytes(range(256)) * 3
    text.write_bytes(payload)
    batches = make_batches(_cfg(tmp_path / "r", data=text), torch.device("cpu"))
    x, y = batches[0]
    assert x.shape == y.shape == (2, 32)
    torch.testing.assert_close(x[:, 1:], y[:, :-1])
    row = bytes(x[0].tolist())
    assert row in payload


def test_run_name() -> None:
    cfg = CollectConfig(preset="tiny", device="cpu", dtype="fp16", attention="sdpa", layers=1)
    assert cfg.out_dir() == Path("runs/tiny-b8-s128-fp16-sdpa-l1-cpu")


def test_profiler_config() -> None:
    p = ProfilerConfig(wait=1, warmup=2, active=3, repeat=2)
    assert p.steps == 12
    assert [i for i in range(14) if p.is_active(i)] == [3, 4, 5, 9, 10, 11]
    assert "with_stack" in (p.memory_timeline_absent_reason() or "")
    assert ProfilerConfig(with_stack=True).memory_timeline_absent_reason() is None
    for bad in ({"active": 0}, {"repeat": 0}, {"wait": -1}, {"record_shapes": 1}):
        with pytest.raises(UsageError):
            ProfilerConfig(**bad)  # type: ignore[arg-type]


def test_percentile_matches_numpy() -> None:
    xs = [5.0, 1.0, 9.5, 3.25, 7.0, 2.0, 8.0]
    for q in (0, 10, 50, 90, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_ceilings_cpu() -> None:
    sizes = CeilingSizes(copy_bytes=2**20, matmul_n=64, warmup=1, repeats=3)
    c = measure_ceilings(torch.device("cpu"), ["fp32", "fp16"], sizes)
    # rates only need to be measured (positive, finite): their size depends on the machine's
    # load, and timing thresholds do not belong in tests
    assert 0 < c.memory_bandwidth_Bps < float("inf")
    assert c.matmul_flops["fp32"] and 0 < c.matmul_flops["fp32"] < float("inf")
    assert c.matmul_flops["fp16"] and c.matmul_flops["fp16"] > 0
    assert c.matmul_flops["tf32"] is None and c.matmul_flops["bf16"] is None
    assert len(c.samples["copy"]) == 3
    assert set(c.to_dict()) == {"memory_bandwidth_Bps", "matmul_flops", "method", "sizes"}
    assert torch.get_float32_matmul_precision() == "highest"  # restored


def test_cpu_ceilings_keep_the_best_repeat_for_long_enough() -> None:
    """A CPU ceiling is the fastest repeat (a repeat slowed by another process's time
    slice is not the hardware's rate), over at least min_seconds of repeats."""
    from tracekit.collectors.ceilings import kept_seconds

    assert kept_seconds(torch.device("cpu"), [0.016, 0.0003, 0.012]) == 0.0003
    assert kept_seconds(torch.device("cuda"), [0.016, 0.0003, 0.012]) == 0.012
    sizes = CeilingSizes(copy_bytes=2**16, matmul_n=32, warmup=1, repeats=3, min_seconds=0.05)
    c = measure_ceilings(torch.device("cpu"), ["fp32"], sizes)
    assert len(c.samples["fp32"]) > 3  # repeated past the 3 asked for (capped at 300)
    assert c.matmul_flops["fp32"] == 2 * 32**3 / min(c.samples["fp32"])
    assert c.method.startswith("best of at least 3 repeats")


def test_fp16_step_on_cpu_uses_grad_scaler(tmp_path: Path) -> None:
    wl = build_workload(_cfg(tmp_path / "r", dtype="fp16"), torch.device("cpu"))
    assert wl.scaler is not None
    before = wl.model.lm_head.weight.detach().clone()
    loss = run_steps(wl.step, 2)
    assert loss is not None and math.isfinite(float(loss))
    assert not torch.equal(before, wl.model.lm_head.weight)


# ------------------------------------------------------------------- the run folder


def test_collect_cli_writes_a_complete_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["collect", *FAST, "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert str(out) in said
    assert "timeline trace: none (the timeline pass records CUDA activity only" in said
    assert "memory_timeline.json.gz, from the category step (with stacks)" in said
    assert "peak allocated n/a" not in said  # issue 35: the report finds a CPU peak
    assert " ".join(f"memory: {runsummary.NO_CPU_PEAK}".split()) in " ".join(said.split())
    m = json.loads((out / "manifest.json").read_text())
    assert m["schema_version"] == 1 and m["status"] == "ok" and m["error"] is None
    for key in ("config", "model", "versions", "device", "metrics", "ceilings", "profiler",
                "artifacts"):  # fmt: skip
        assert key in m
    assert m["config"]["batch"] == 2 and m["config"]["model"]["n_layer"] == 2
    assert m["model"]["n_params"] == count_params(PRESETS["tiny"])
    assert m["device"]["type"] == "cpu"
    assert m["versions"]["torch"] == torch.__version__
    met = m["metrics"]
    assert met["step_time_ms"]["n"] == 3
    assert met["step_time_ms"]["p10"] <= met["step_time_ms"]["median"] <= met["step_time_ms"]["p90"]
    assert met["tokens_per_s"] == pytest.approx(met["samples_per_s"] * 32)
    assert met["profiled_step_time"]["n"] == m["profiler"]["active"] == 2
    assert math.isfinite(met["profiler_overhead_pct"])
    assert met["peak_allocated_bytes"] is None  # CPU: no allocator counters
    assert m["ceilings"]["matmul_flops"]["fp32"] > 0
    assert m["ceilings"]["matmul_flops"]["bf16"] is None
    arts = m["artifacts"]
    trace = out / arts["trace"]
    assert trace.name.endswith(".pt.trace.json.gz")
    assert (out / arts["tensorboard"]).is_dir()
    assert arts["memory_snapshot"] is None and "cpu" in arts["memory_snapshot_absent"]
    # memory by category by default: one more step recorded with stacks, not in the trace
    assert arts["memory_timeline_absent"] is None
    assert arts["memory_timeline_pass"] == "category step (with stacks)"
    cat = json.loads(gzip.decompress((out / arts["memory_timeline"]).read_bytes()))
    assert cat["format"] == "tracekit.memory_timeline" and len(cat["times_us"]) > 0
    # the light timeline pass records CUDA activity: on CPU it is skipped, with the reason
    assert arts["timeline_trace"] is None and "CUDA activity only" in arts["timeline_trace_absent"]
    assert met["timeline_step_time_ms"] is None and m["profiler"]["timeline"] is None
    assert m["profiler"]["timeline_pass"] is True
    # warm-up, timed, profiled (1+1+2), category, the residual check
    assert m["total_steps"] == 1 + 3 + 4 + 2 + 10
    assert sorted(p.name.split(".", 2)[-1] for p in out.iterdir() if p.is_file()) == [
        "json",  # manifest.json
        "memory_timeline.json.gz",
        "profiler_flops.json.gz",
        "pt.trace.json.gz",
    ]
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    names = {e.get("name", "") for e in doc["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)
    assert "aten::softmax" in names or "aten::_softmax" in names  # naive attention
    assert doc.get("record_shapes") == 1 and doc.get("profile_memory") == 1
    assert _leftovers(tmp_path) == []
    assert not [p for p in out.iterdir() if ".tmp" in p.name]

    parse = pytest.importorskip("tracekit.parse")
    if not hasattr(parse, "load"):
        pytest.skip("tracekit.parse.load has not landed on this branch yet")
    t = parse.load(out)
    assert t.manifest is not None and t.manifest["status"] == "ok"
    assert len(t.steps) == 2
    from tracekit.summary import trace_facts

    tf = trace_facts(t).timeline_facts  # the report says why its timeline is the full pass's
    assert tf is not None and tf.source == "full" and tf.reason is not None
    assert tf.reason.startswith("no light timeline pass: the timeline pass records CUDA")
    from tracekit.classify import classify
    from tracekit.summary import summarize

    # without --with-stack the trace lacks stacks, but not the memory by category
    missing = " | ".join(summarize(t, classify(t, manifest=t.manifest)).header.missing)
    assert "with_stack off: no Python stacks in this trace: no module paths" in missing
    assert "from the run's category step (with stacks)" in missing
    assert "no per-category memory timeline" not in missing


def test_with_stack_exports_the_memory_timeline(tmp_path: Path) -> None:
    out = collect_mod.collect(
        _cfg(tmp_path / "r", profiler=ProfilerConfig(wait=0, warmup=1, active=1, with_stack=True))
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["artifacts"]["memory_timeline_absent"] is None
    assert m["artifacts"]["memory_timeline_pass"] == "main window"  # no category step
    assert m["total_steps"] == 1 + 2 + 2 + 10
    doc = json.loads(gzip.decompress((out / m["artifacts"]["memory_timeline"]).read_bytes()))
    assert doc["format"] == "tracekit.memory_timeline" and doc["time_unit"] == "us"
    cats = doc["categories"]
    assert {"parameter", "gradient", "optimizer_state", "activation"} <= set(cats)
    assert len(doc["times_us"]) == len(doc["bytes"]) > 0
    assert all(len(row) == len(cats) for row in doc["bytes"])
    params = [row[cats.index("parameter")] for row in doc["bytes"]]
    # fp32 parameters are live throughout the profiled step
    assert max(params) == count_params(PRESETS["tiny"]) * 4


def test_sdpa_trace_has_no_explicit_softmax(tmp_path: Path) -> None:
    out = collect_mod.collect(_cfg(tmp_path / "r", attention="sdpa"))
    m = json.loads((out / "manifest.json").read_text())
    names = {e.get("name") for e in json.loads(
        gzip.decompress((out / m["artifacts"]["trace"]).read_bytes()))["traceEvents"]}  # fmt: skip
    assert "aten::scaled_dot_product_attention" in names
    assert "aten::softmax" not in names


# ------------------------------------------------------------------ failures


def _failing_step(monkeypatch: pytest.MonkeyPatch, exc: BaseException, after: int) -> None:
    """Make the workload's step raise ``exc`` on its call number ``after``."""
    real = collect_mod.build_workload

    def build(cfg: CollectConfig, device: torch.device) -> Any:
        wl = real(cfg, device)
        calls = {"n": 0}

        def step(i: int) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] > after:
                raise exc
            return wl.step(i)

        return dataclasses.replace(wl, step=step)

    monkeypatch.setattr(collect_mod, "build_workload", build)


def test_oom_writes_status_oom_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_step(monkeypatch, torch.OutOfMemoryError("CUDA out of memory. Tried 20 GiB"), 2)
    out = tmp_path / "oom"
    rc = main(["collect", *FAST, "--no-ceilings", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 3
    assert "out of memory" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "oom" and "OutOfMemoryError" in m["error"]
    assert m["config"]["batch"] == 2 and m["config"]["seq"] == 32
    assert m["artifacts"]["trace"] is None and m["metrics"] is None


def test_oom_raises_the_tracekit_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_step(monkeypatch, torch.cuda.OutOfMemoryError("CUDA out of memory"), 0)
    with pytest.raises(OutOfMemoryError) as info:
        collect_mod.collect(_cfg(tmp_path / "r"))
    assert info.value.exit_code == 3


def test_ctrl_c_leaves_nothing_and_keeps_an_older_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text('{"status": "ok"}')
    # interrupted inside the profiled window (warm-up 1 + timed 2 + wait 1 + warmup 1 + 1)
    _failing_step(monkeypatch, KeyboardInterrupt(), 6)
    with pytest.raises(KeyboardInterrupt):
        collect_mod.collect(_cfg(out))
    assert (out / "manifest.json").read_text() == '{"status": "ok"}'
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]
    assert _leftovers(tmp_path) == []


def test_failed_trace_export_leaves_no_partial_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_export(self: Any, path: str, *a: Any, **k: Any) -> None:
        Path(path).write_bytes(b'{"traceEvents": [')  # half a trace, then the failure
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken_export)
    out = tmp_path / "run"
    with pytest.raises(TracekitError, match="disk full"):
        collect_mod.collect(_cfg(out))
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "error" and "disk full" in m["error"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "tensorboard"]
    assert _leftovers(tmp_path) == []


def test_validation_errors_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv, message in [
        ([*TINY, "--batch", "0"], "--batch must be an integer >= 1"),
        ([*TINY, "--seq", "4096"], "exceeds the context"),
        (["--device", "cpu", "--preset", "nope"], "unknown preset 'nope'"),
        ([*TINY, "--profile-active", "0"], "profiler active"),
    ]:
        assert main(["collect", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tracekit: error: ") and message in err
        assert len(err.strip().splitlines()) == 1
    monkeypatch.setattr(
        "tracekit.collectors.config.compile_unsupported_reason", lambda d: "no inductor here"
    )
    assert main(["collect", *TINY, "--compile"]) == 2
    assert "--compile: no inductor here" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bad_flags_are_refused_before_torch_is_imported(tmp_path: Path) -> None:
    """A fresh ``tracekit collect`` with a bad flag exits 2 without importing torch (a
    refused sweep row costs a fraction of a second, not torch's import)."""
    import subprocess
    import sys

    code = (
        "import sys; from tracekit.cli import main\n"
        "rc = main(['collect', '--device', 'cpu', '--preset', 'tiny', '--seq', '256'])\n"
        "print('torch imported:', 'torch' in sys.modules); sys.exit(rc)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stdout.strip() == "torch imported: False"
    assert p.stderr.strip().startswith("tracekit: error: --seq 256 exceeds the context")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_absent_suggests_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--preset", "tiny", "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "CUDA was requested" in err and "--device cpu" in err
    assert not (tmp_path / "r").exists()


def test_profiler_interrupted_in_its_window_exports_nothing(tmp_path: Path) -> None:
    from tracekit.collectors.profiler import Profiler

    m = torch.nn.Linear(8, 8)
    with (
        pytest.raises(KeyboardInterrupt),
        Profiler(
            ProfilerConfig(wait=0, warmup=0, active=3), tmp_path, device=torch.device("cpu")
        ) as prof,
    ):
        m(torch.randn(2, 8)).sum().backward()
        prof.step()
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == [] and prof.traces == []


def test_profiler_flops_table_beside_the_trace(tmp_path: Path) -> None:
    """torch's own FLOP estimates are kept per (op, shapes): the trace no longer has them."""
    import gzip
    import json

    from tracekit.cli import main

    out = tmp_path / "run"
    rc = main(
        [
            "collect",
            "--device",
            "cpu",
            "--preset",
            "tiny",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--profile-active",
            "1",
            "--no-ceilings",
            "--no-memory-snapshot",
            "-q",
            "--xspace",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    doc = json.loads(gzip.decompress((out / manifest["artifacts"]["profiler_flops"]).read_bytes()))
    rows = {(r["name"], json.dumps(r["input_shapes"])): r for r in doc["rows"]}
    # tiny: 8 x 128 tokens, 64 wide; the QKV projection is addmm [192], [1024, 64], [64, 192].
    r = rows[("aten::addmm", json.dumps([[192], [1024, 64], [64, 192], [], []]))]
    assert r["flops"] == r["count"] * 2 * 1024 * 64 * 192
    assert list((out / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_profiler_flops_rows_are_torchs_key_averages() -> None:
    """The FLOP table read from Kineto's events is, row for row and in the same order,
    what torch's key_averages(group_by_input_shape=True) gives for operators with FLOPs."""
    from tracekit.collectors.profiler import profiler_flops_rows

    wl = build_workload(CollectConfig(preset="tiny", device="cpu", seq=32), torch.device("cpu"))
    with torch.profiler.profile(record_shapes=True, with_flops=True) as prof:
        for i in range(2):
            wl.step(i)
    assert prof.profiler.kineto_results is not None  # the Kineto path, not the fallback
    ours = profiler_flops_rows(prof)
    torchs = [
        {"name": e.key, "input_shapes": e.input_shapes, "count": int(e.count),
         "flops": int(e.flops)}
        for e in prof.key_averages(group_by_input_shape=True)
        if e.flops
    ]  # fmt: skip
    assert len(ours) >= 10 and json.dumps(ours) == json.dumps(torchs)
    assert {"aten::addmm", "aten::mm", "aten::bmm"} <= {r["name"] for r in ours}


def test_profiler_leaves_no_garbage_for_later_steps(tmp_path: Path) -> None:
    """torch's profile object (and a memory timeline's event trees) are reference cycles:
    the wrapper frees them between steps, at the next cycle's warm-up and on exit, so no
    later step pays for collecting them (on the H200 the steps after an unfreed window were
    7 % slower)."""
    import gc

    from tracekit.collectors.profiler import Profiler

    cfg = CollectConfig(preset="tiny", device="cpu", seq=32, memory_snapshot=False)
    wl = build_workload(cfg, torch.device("cpu"))
    pcfg = ProfilerConfig(wait=1, warmup=1, active=2, repeat=2, memory_timeline=False)
    steps: list[int] = []
    found: list[int] = []

    def probe() -> None:  # runs after each step: before cycle 2's first active one, look
        steps.append(len(steps))
        if len(steps) == pcfg.cycle + pcfg.wait + pcfg.warmup:
            found.append(gc.collect())

    gc.collect()
    with Profiler(pcfg, tmp_path, device=wl.device) as prof:
        run_steps(wl.step, pcfg.steps, stepper=prof, on_step=probe)
    after_exit = gc.collect()
    assert len(prof.traces) == 2 and len(prof.flops_tables) == 2
    assert found == [0]  # cycle 1's results were freed at cycle 2's warm-up
    assert after_exit == 0

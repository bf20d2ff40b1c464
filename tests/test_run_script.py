"""`tracekit run -- python script.py`: user scripts it never saw, profiled on CPU.

The scripts in tests/scripts/ are plain PyTorch (no tracekit import). Parameter counts are
worked out by hand below; the schedule is 1 warm-up + 2 timed + 2 profiled steps (profiler
warm-up 1, active 1) + 2 in the category step (memory by category, with stacks) = 7 steps:
on the CPU there is no light timeline pass (CUDA activity only). The tests of what tracekit
reads from a script run with --no-memory-timeline (5 steps, no category step)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.cpu_classes import SCRIPTS as CPU_CLASSES
from tracekit.cli import main

SCRIPTS = Path(__file__).resolve().parent / "scripts"
FAST = ["--warmup", "1", "--steps", "2", "--profile-wait", "0", "--profile-warmup", "1",
        "--profile-active", "1", "--no-ceilings", "-q"]  # fmt: skip
STEPS = 17  # 1 + 2 + (0 + 1 + 1) + 2, then 10 in the residual check
# the tests of what tracekit reads from a script leave the category step out (0.5-1 s each)
LEAN = ("--no-memory-timeline",)
LEAN_STEPS = 15


def _run(
    capsys: pytest.CaptureFixture[str],
    out: Path,
    script: str,
    *args: str,
    opts: tuple[str, ...] = (),
    lean: bool = True,
) -> tuple[int, dict[str, Any] | None, str, str]:
    fast = [*FAST, *(LEAN if lean else ())]
    rc = main(["run", *fast, *opts, "-o", str(out), "--", "python", str(SCRIPTS / script), *args])
    o, e = capsys.readouterr()
    mpath = out / "manifest.json"
    return rc, (json.loads(mpath.read_text()) if mpath.exists() else None), o, e


def _files(run: Path) -> list[str]:
    """The run folder's files, with the trace's <host>_<pid>.<ns> stem replaced by '*'."""
    out = []
    for p in sorted(run.rglob("*")):
        rel = p.relative_to(run).as_posix() + ("/" if p.is_dir() else "")
        out.append("*." + rel.split(".", 2)[2] if rel.count(".") >= 3 else rel)
    return sorted(out)


def _trace_events(run: Path, m: dict[str, Any]) -> list[dict[str, Any]]:
    doc = json.loads(gzip.decompress((run / m["artifacts"]["trace"]).read_bytes()))
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def _spans(events: list[dict[str, Any]], name: str) -> list[tuple[float, float]]:
    """(start, end) of the complete events named ``name`` (``name*``: starting with it)."""
    exact = not name.endswith("*")
    return [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("ph") == "X"
        and (e.get("name") == name if exact else str(e.get("name", "")).startswith(name[:-1]))
    ]


def _op_classes(run: Path) -> dict[str, set[str]]:
    """The class a kernel launched by each operator of the profiled step would get (the
    operator and its ancestors decide): CPU runs have no kernels to class, their operators
    show what a GPU run of the script would report."""
    import pandas as pd

    from tracekit.classify.classes import classify_kernels
    from tracekit.parse import load

    t = load(run)
    ops = t.ops[(t.ops["step"] >= 0) & (t.ops["category"] == "cpu_op")]
    k = pd.DataFrame({"name": "generic", "kind": "kernel", "op_id": ops["op_id"].to_numpy()})
    out: dict[str, set[str]] = {}
    for name, cls in zip(ops["name"], classify_kernels(k, t.ops)["class"], strict=True):
        out.setdefault(str(name), set()).add(str(cls))
    return out


def _assert_op_classes(run: Path, want: dict[str, str]) -> dict[str, set[str]]:
    got = _op_classes(run)
    for op, cls in want.items():
        assert got[op] == {cls}, op
    return got


def _report_classes(run: Path, script: str) -> None:
    """The CPU run's report: its work operators classed as tests/cpu_classes.py says."""
    from tracekit.commands.report import report

    sm = report(run, no_tensorboard=True).summary
    assert sm.device_kind == "cpu" and sm.summary["device_kind"] == "cpu"
    assert sm.critical_path is None and sm.summary["cpu"]["work_ops_per_step"] > 0
    assert [str(v) for v in sm.broken] == []  # tracekit/summary/invariants.py
    cl = sm.classes[sm.classes["kernel_count"] > 0]
    want = CPU_CLASSES[script]
    assert dict(zip(cl["class"], cl["kernel_count"], strict=True)) == want["classes"]
    ops = sm.operators.groupby("name")["class"].agg(lambda c: sorted(set(c)))
    assert {op: ops[op] for op in want["ops"]} == {op: [c] for op, c in want["ops"].items()}


# ------------------------------------------------------------------ the scripts


def test_mlp_run_folder_and_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp"
    rc, m, stdout, stderr = _run(capsys, out, "mlp.py", "--iters", "30", lean=False)
    assert rc == 0, stderr
    assert m is not None and m["status"] == "ok" and m["error"] is None
    assert m["workload"] == "script" and m["schema_version"] == 1
    assert _files(out) == [
        "*.memory_timeline.json.gz", "*.profiler_flops.json.gz", "*.pt.trace.json.gz",
        "manifest.json", "tensorboard/",
    ]  # fmt: skip
    assert m["total_steps"] == m["schedule_steps"] == STEPS
    assert m["schedule"] == [
        {"phase": "warmup", "steps": [1, 1]}, {"phase": "timed", "steps": [2, 3]},
        {"phase": "profiled", "steps": [4, 5]}, {"phase": "category", "steps": [6, 7]},
        {"phase": "residual", "steps": [8, 17]},
    ]  # fmt: skip
    # memory by category by default: the category step after the window, not in its trace
    arts = m["artifacts"]
    assert arts["memory_timeline_pass"] == "category step (with stacks)"
    assert arts["memory_timeline_absent"] is None
    cat = json.loads(gzip.decompress((out / arts["memory_timeline"]).read_bytes()))
    params = [row[cat["categories"].index("parameter")] for row in cat["bytes"]]
    assert max(params) == 6922 * 4  # the MLP's fp32 parameters, live through the step
    # no light timeline pass on the CPU, and the manifest says why
    assert arts["timeline_trace"] is None and arts["timeline_traces"] == []
    assert arts["timeline_trace_absent"] == (
        "the timeline pass records CUDA activity only (a CPU step has none); this run is on cpu"
    )
    assert m["profiler"]["timeline"] is None and m["profiler"]["timeline_pass"] is True
    # 32*64+64 + 64*64+64 + 64*10+10 parameters in 6 tensors; AdamW keeps exp_avg,
    # exp_avg_sq (fp32) and a 4-byte step tensor per parameter tensor
    assert m["model"]["n_params"] == 6922 and m["model"]["module_params"] == 6922
    assert m["model"]["class"] == "torch.nn.modules.container.Sequential"
    opt = m["optimizer"]
    assert opt["classes"] == ["AdamW"] and opt["n_tensors"] == 6
    assert opt["param_bytes"] == 6922 * 4 and opt["grad_bytes"] == 6922 * 4
    assert opt["state_bytes"] == 2 * 6922 * 4 + 6 * 4
    assert [g["numel"] for g in opt["param_groups"]] == [6922]
    assert opt["param_groups"][0]["settings"]["lr"] == 1e-3
    assert m["inputs"]["shape"] == [16, 32] and m["inputs"]["calls_per_step"] == 1
    assert m["config"]["batch"] == m["config"]["samples_per_step"] == 16
    assert m["config"]["seq"] is None and m["config"]["tokens_per_step"] is None
    assert m["config"]["step_marker"] == "optimizer" and m["config"]["stop_after"] is True
    met = m["metrics"]
    assert met["step_time_ms"]["n"] == 2 and met["profiled_step_time"]["n"] == 1
    assert met["samples_per_s"] == pytest.approx(16 / (met["step_time_ms"]["median"] / 1e3))
    assert met["tokens_per_s"] is None and met["peak_allocated_bytes"] is None
    assert m["device"]["type"] == "cpu" and m["versions"]["torch"] == torch.__version__
    assert m["ceilings"] is None and m["ceilings_absent"] == "disabled (ceilings off)"
    script = m["script"]
    path = SCRIPTS / "mlp.py"
    assert script["path"] == str(path) and script["module"] is None
    assert script["argv"] == [str(path), "--iters", "30"]
    assert script["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert script["ended"] == "stopped" and script["stopped_at_step"] == STEPS
    assert script["exit_code"] == 0
    assert "iter 0 loss" in stdout and "done" not in stdout  # stopped before its end
    assert "status ok" in stdout and "stopped the script after step 17: the schedule is" in stderr
    assert "memory timeline: " in stdout and "from the category step (with stacks)" in stdout
    # the profiled step is a ProfilerStep holding the whole Optimizer.step range
    ev = _trace_events(out, m)
    (step,) = _spans(ev, "ProfilerStep#*")
    (opt_span,) = _spans(ev, "Optimizer.step#AdamW.step")
    assert step[0] <= opt_span[0] and opt_span[1] <= step[1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    _report_classes(out, "mlp.py")


def test_cnn_with_batch_norm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cnn"
    rc, m, _, err = _run(capsys, out, "cnn_bn.py", "16")
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["total_steps"] == LEAN_STEPS
    # conv 3*8*9+8, bn 2*8, conv 8*16*9+16, bn 2*16, linear 16*10+10
    assert m["model"]["n_params"] == 224 + 16 + 1168 + 32 + 170 == 1610
    assert m["model"]["class"] == "__main__.Net"
    # running mean/var (fp32) and num_batches_tracked (int64) of the two batch-norms
    assert m["model"]["module_buffers_bytes"] == (8 + 8 + 16 + 16) * 4 + 2 * 8
    assert m["optimizer"]["classes"] == ["SGD"]
    assert m["optimizer"]["state_bytes"] == 1610 * 4  # momentum buffers
    assert m["config"]["samples_per_step"] == 8 and m["inputs"]["shape"] == [8, 3, 16, 16]
    names = {e.get("name") for e in _trace_events(out, m)}
    assert {"aten::convolution", "aten::max_pool2d", "aten::batch_norm"} <= names
    cls = _assert_op_classes(
        out,
        {
            "aten::mkldnn_convolution": "convolution",
            "aten::convolution_backward": "convolution",
            "aten::native_batch_norm": "batchnorm",
            "aten::native_batch_norm_backward": "batchnorm",
            "aten::max_pool2d_with_indices": "pooling",
            "aten::max_pool2d_with_indices_backward": "pooling",
            "aten::mean": "pooling",  # AdaptiveAvgPool2d(1) runs a mean
            "aten::clamp_min": "activation",  # inside relu
            "aten::addmm": "gemm",
            "aten::_log_softmax": "softmax",
            "aten::nll_loss_forward": "loss",
        },
    )
    assert "layernorm" not in set().union(*cls.values())
    _report_classes(out, "cnn_bn.py")


def test_transformer_with_rmsnorm_swiglu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lm"
    rc, m, _, err = _run(capsys, out, "transformer.py", "--iters", "10")
    assert rc == 0, err
    assert m is not None and m["status"] == "ok"
    # embedding 64*32; per block: 2 norms 2*32, qkv 32*96, proj 32*32, SwiGLU 3*32*64;
    # final norm 32; untied head 32*64
    per_block = 2 * 32 + 32 * 96 + 32 * 32 + 3 * 32 * 64
    assert m["model"]["n_params"] == 64 * 32 + 2 * per_block + 32 + 32 * 64 == 24736
    assert m["model"]["config_source"] == "dataclasses.asdict(TinyLM.config)"
    assert m["model"]["config"] == {
        "vocab_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 32, "hidden": 64,
        "block_size": 16,
    }  # fmt: skip
    # token ids (4, 16): 4 samples, 64 tokens per step
    assert m["inputs"]["dtype"] == "torch.int64" and m["inputs"]["shape"] == [4, 16]
    assert m["config"]["batch"] == 4 and m["config"]["seq"] == 16
    assert m["config"]["tokens_per_step"] == 64
    met = m["metrics"]
    step_s = met["step_time_ms"]["median"] / 1e3
    assert met["tokens_per_s"] == pytest.approx(64 / step_s)
    assert met["model_flops_per_s"] == pytest.approx(6 * 24736 * 64 / step_s)
    names = {e.get("name") for e in _trace_events(out, m)}
    assert {"aten::scaled_dot_product_attention", "aten::rsqrt", "aten::silu"} <= names
    _assert_op_classes(
        out,
        {
            "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
            "aten::silu": "activation",
            "aten::silu_backward": "activation",
            "aten::mm": "gemm",
            "aten::embedding": "embedding",
            "aten::embedding_dense_backward": "embedding",
            "aten::contiguous": "layout",  # y.transpose(1, 2).reshape(...)
            "aten::lerp_": "optimizer",
            # a hand-written RMSNorm (x * rsqrt(mean(x²) + eps)) has no norm operator: its
            # pieces are element-wise and a reduction (nn.RMSNorm's aten::rms_norm is rmsnorm)
            "aten::rsqrt": "elementwise",
            "aten::mean": "reduction",
        },
    )
    _report_classes(out, "transformer.py")


def test_gradient_accumulation_step_is_the_optimizer_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "accum"
    rc, m, _, err = _run(capsys, out, "grad_accum.py")
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["total_steps"] == LEAN_STEPS
    assert m["model"]["n_params"] == 50 * 16 + 16 * 5 + 5 == 885
    inputs = m["inputs"]
    assert inputs["calls_per_step"] == 4 and inputs["shape"] == [2, 8]
    assert m["config"]["samples_per_step"] == 8 and m["config"]["tokens_per_step"] == 64
    assert m["config"]["seq"] == 8
    ev = _trace_events(out, m)
    (step,) = _spans(ev, "ProfilerStep#*")
    embeds = [s for s in _spans(ev, "aten::embedding") if step[0] <= s[0] <= step[1]]
    assert len(embeds) == 4  # four micro-batches in the one profiled step
    _report_classes(out, "grad_accum.py")


def test_options_override_inferred_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mlp"
    opts = ("--samples-per-step", "32", "--tokens-per-step", "512")
    rc, m, _, _ = _run(capsys, out, "mlp.py", opts=opts)
    assert rc == 0 and m is not None
    assert m["config"]["batch"] == 32 and m["config"]["seq"] == 16
    assert m["config"]["per_step_source"] == "samples and tokens per step given as options"


def test_run_on_lets_the_script_finish(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mlp"
    rc, m, stdout, _ = _run(capsys, out, "mlp.py", "--iters", "22", opts=("--run-on",))
    assert rc == 0 and m is not None and m["status"] == "ok"
    assert "done" in stdout  # the script's last line
    assert m["schedule_steps"] == LEAN_STEPS and m["total_steps"] == 22
    assert m["script"]["ended"] == "finished" and m["script"]["stopped_at_step"] is None


def _leaves(d: dict[str, Any], pre: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for k, v in d.items():
        out += _leaves(v, (*pre, k)) if isinstance(v, dict) and v else [((*pre, k), v)]
    return out


def test_report_gets_from_a_run_manifest_what_it_gets_from_collect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run manifest has every key of collect's that the report reads: a real run's
    manifest given the H200 fixture's values *in the keys it already has* makes the same
    report on the fixture's trace as the fixture's own collect manifest, except the header's
    GPT-only config and the analytic memory and traffic models of tracekit's GPT (a script
    has no preset)."""
    from tracekit.classify import classify
    from tracekit.collectors.collect import empty_artifacts
    from tracekit.parse import load
    from tracekit.summary import summarize

    out = tmp_path / "mlp"
    opts = [a for a in FAST if a != "--no-ceilings"]  # measured after the script ended
    assert main(["run", *opts, "-o", str(out), "--", str(SCRIPTS / "mlp.py"), "--iters", "8"]) == 0
    rm = json.loads((out / "manifest.json").read_text())
    c = rm["ceilings"]
    assert c["memory_bandwidth_Bps"] > 0 and c["matmul_flops"]["fp32"] > 0
    assert c["matmul_flops"]["bf16"] is None and rm["ceilings_absent"] is None

    fx = Path(__file__).resolve().parents[1] / "fixtures" / "h200-gpt2s-b8-s128-bf16-sdpa"
    cm = json.loads((fx / "manifest.json").read_text())
    absent = []
    for path, value in _leaves(cm):
        d = rm
        for k in path[:-1]:
            d = d.get(k) if isinstance(d.get(k), dict) else {}
        if path[-1] in d:
            d[path[-1]] = value
        else:
            absent.append(".".join(path))
    # artifacts newer than the fixture (the light pass's, the category step's): as collect
    # left them before they existed
    for key in set(rm["artifacts"]) - set(cm["artifacts"]):
        rm["artifacts"][key] = empty_artifacts()[key]
    # written by run_counters, the same function for both (tests/test_run_counters.py)
    rm["counters"] = cm["counters"]
    for key in ("counters", "counters_gemm"):
        rm["artifacts"][key] = cm["artifacts"][key]
    assert {a.split(".")[0] for a in absent} == {"config", "model", "artifacts", "counters"}
    assert [a for a in absent if a.startswith("model.")] == [
        "model." + k for k in ("train_flops_per_token", "flops_formula", *cm["config"]["model"])
    ]
    run = tmp_path / "fixture-as-run"
    shutil.copytree(fx, run)
    (run / "manifest.json").write_text(json.dumps(rm))

    def summary(p: Path) -> dict[str, Any]:
        t = load(p)
        cls = classify(t, manifest=t.manifest)
        doc: dict[str, Any] = summarize(t, cls).summary  # as tracekit report does
        return doc

    want, got = summary(fx), summary(run)
    for doc in (want, got):
        doc.pop("title"), doc.pop("trace")
    assert {k: v for k, v in want.pop("config").items() if v is not None} == {
        "preset": "gpt2-small", "batch": 8, "seq": 128, "dtype": "bf16", "attention": "sdpa",
        "compile": False, "device": "cuda", "tf32": False,
    }  # fmt: skip
    assert {k: v for k, v in got.pop("config").items() if v is not None} == {
        "batch": 8, "seq": 128, "device": "cuda", "tf32": False,
    }  # fmt: skip
    # no "analytic traffic estimate unavailable" note: the summary's own estimate stands
    assert set(got.pop("notes")) ^ set(want.pop("notes")) == set()
    # the analytic memory and traffic models are tracekit's GPT's (tracekit.classify.models)
    assert want["memory"]["model"]["peak_bytes"] > 0
    assert got["memory"]["model"]["peak_bytes"] is None
    # the script's model (an MLP: no configuration) is no transformer the model applies to
    note = got["memory"]["model"]["note"]
    assert "is of a GPT-style transformer; Sequential has no configuration" in note
    for doc in (want, got):
        doc["memory"].pop("model"), doc["sources"].pop("analytic_traffic")
        doc["step_summary"].pop("analytic_traffic")
    assert got == want


# -------------------------------------------------------------- step markers


def test_function_marker_of_the_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sgd"
    opts = ("--step-marker", "function:train_step")
    rc, m, _, err = _run(capsys, out, "manual_sgd.py", opts=opts)
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["total_steps"] == LEAN_STEPS
    assert m["optimizer"] is None and m["model"]["n_params"] is None
    assert m["config"]["step_definition"] == (
        "from the return of one call of train_step to the next"
    )
    assert len(_spans(_trace_events(out, m), "ProfilerStep#*")) == 1


def test_function_marker_of_a_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sgd"
    rc, m, _, err = _run(
        capsys, out, "manual_sgd.py", opts=("--step-marker", "function:steplib:sgd_update")
    )
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["total_steps"] == LEAN_STEPS
    import steplib  # type: ignore[import-not-found]  # the script imported it

    assert not hasattr(steplib.sgd_update, "__tracekit_marked__")  # unwrapped again


def test_cuda_graph_marker_counts_the_first_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_replay(graph: Any) -> None:  # CPU: the script's stand-in graphs run Python
        graph.work()

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", fake_replay)
    out = tmp_path / "graphs"
    rc, m, _, err = _run(capsys, out, "graph_replay.py", opts=("--step-marker", "cuda-graph"))
    assert rc == 0, err
    assert m is not None and m["status"] == "ok" and m["total_steps"] == LEAN_STEPS
    ev = _trace_events(out, m)
    (step,) = _spans(ev, "ProfilerStep#*")
    # one step = the forward graph's replay to the next: one forward, one backward
    assert len([s for s in _spans(ev, "aten::linear") if step[0] <= s[0] <= step[1]]) == 1
    assert torch.cuda.CUDAGraph.replay is fake_replay  # restored


def test_marker_function_not_defined_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sgd"
    rc, m, _, err = _run(capsys, out, "manual_sgd.py", opts=("--step-marker", "function:nope"))
    assert rc == 2 and m is None and not out.exists()
    assert err.startswith("tracekit: error: --step-marker function:nope:") and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- bad input


def test_script_that_raises_shows_its_own_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "raises"
    rc, m, _, err = _run(capsys, out, "raises.py")
    assert rc == 1
    plain = subprocess.run(
        [sys.executable, str(SCRIPTS / "raises.py")], capture_output=True, text=True
    )
    assert plain.returncode == 1
    tb, note = err.rsplit("\n", 2)[0] + "\n", err.rsplit("\n", 2)[1]
    assert tb.endswith(plain.stderr)  # exactly what python prints, after our schedule line
    assert note == (
        f"tracekit: the script failed after 3 steps ({out}/manifest.json has status 'error')"
    )
    assert m is not None and m["status"] == "error"
    assert m["error"] == "ValueError: corrupt batch 3"
    assert m["script"]["ended"] == "raised" and m["script"]["exit_code"] == 1
    # warm-up and timed steps were done: their metrics are kept; the profiler was not
    assert m["metrics"]["step_time_ms"]["n"] == 2 and m["metrics"]["profiled_step_time"] is None
    assert m["artifacts"]["trace"] is None


def test_script_exit_status_is_passed_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mlp"
    rc, m, _, err = _run(capsys, out, "mlp.py", "--bogus")
    assert rc == 2  # argparse's exit status
    assert "unrecognized arguments: --bogus" in err
    assert m is not None and m["status"] == "error" and m["error"] == "SystemExit: 2"


def test_no_optimizer_names_the_step_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sgd"
    rc, m, _, err = _run(capsys, out, "manual_sgd.py")
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(
        "tracekit: error: the script ended without a step: no torch.optim optimizer stepped; "
        "mark steps another way with --step-marker function:NAME"
    )
    assert m is not None and m["status"] == "incomplete" and m["total_steps"] == 0
    assert m["metrics"] is None and m["artifacts"]["trace"] is None


@pytest.mark.parametrize(
    ("iters", "reached", "trace", "absent"),
    [
        (3, "the timed steps done", False, "the loop ended before the profiled steps"),
        (6, "1 of the 2 steps of the category step", True, "the loop ended in the category step"),
    ],
)
def test_script_ending_before_the_schedule_is_done(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    iters: int,
    reached: str,
    trace: bool,
    absent: str,
) -> None:
    out = tmp_path / "mlp"
    rc, m, _, err = _run(capsys, out, "mlp.py", "--iters", str(iters), lean=False)
    assert rc == 2 and err.count("\n") == 1
    assert (
        f"the loop ended after {iters} steps ({reached}); the schedule needs 7 (1 warm-up, 2 "
        "timed before any pass, " in err
    )
    assert m is not None and m["status"] == "incomplete" and m["total_steps"] == iters
    assert m["error"].startswith(f"the loop ended after {iters} steps ({reached})")
    assert m["metrics"]["step_time_ms"]["n"] == 2  # the timed steps were reached
    assert (m["metrics"]["profiled_step_time"] is not None) == trace
    arts = m["artifacts"]
    assert (arts["trace"] is not None) == trace and (out / str(arts["trace"])).is_file() == trace
    assert arts["memory_timeline"] is None and arts["memory_timeline_absent"] == absent
    assert arts["memory_timeline_pass"] is None
    assert "CUDA activity only" in arts["timeline_trace_absent"]
    assert m["schedule_steps"] == STEPS and not [p for p in tmp_path.iterdir() if p.name != "mlp"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--", "python", "nope.py"], "tracekit: error: nope.py: no such script"),
        (["run", "python", "x.py"], "tracekit: error: put the script's command after `--`"),
        (["run", "--"], "tracekit: error: no script after `--`"),
        (["run", "--", "python", "-X", "dev", "t.py"], "tracekit: error: python option -X"),
        (["run", "--", "torchrun", "t.py"], "tracekit: error: torchrun: distributed launchers"),
        (["run", "--", "-m", "no_such_module_xyz"], "tracekit: error: -m no_such_module_xyz"),
        (["run", "--steps", "0", "--", "t.py"], "tracekit: error: steps must be an integer >= 1"),
        (["run", "--warmup", "0", "--", "t.py"], "tracekit: error: warmup must be an integer"),
        (["run", "--step-marker", "loss", "--", "t.py"], "tracekit: error: --step-marker must"),
        (["run", "--device", "cpu", "--counters", "--", "t.py"], "tracekit: error: --counters"),
    ],
)
def test_bad_command_lines(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print('never')\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


def test_ctrl_c_leaves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import torch\n"
        "p = torch.nn.Parameter(torch.ones(2))\n"
        "opt = torch.optim.SGD([p], lr=0.1)\n"
        "for i in range(10):\n"
        "    p.sum().backward(); opt.step()\n"
        "    if i == 2: raise KeyboardInterrupt\n"
    )
    out = tmp_path / "run"
    assert main(["run", *FAST, "-o", str(out), "--", str(script)]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["interrupted.py"]


def test_stop_passes_through_except_exception_and_lr_schedulers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "guarded.py"
    script.write_text(
        "import warnings, torch\n"
        "p = torch.nn.Parameter(torch.ones(4))\n"
        "opt = torch.optim.AdamW([p], lr=0.1)\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, 1)\n"
        "for i in range(50):\n"
        "    try:\n"
        "        with warnings.catch_warnings(record=True) as seen:\n"
        "            warnings.simplefilter('always')\n"
        "            p.square().sum().backward(); opt.step(); opt.zero_grad(); sched.step()\n"
        "            if i == 1:  # made after the first step: wraps tracekit's wrapper\n"
        "                sched2 = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)\n"
        "            if i > 1: sched2.step()\n"
        "        for w in seen: print('warning', w.message)\n"
        "    except Exception as e:\n"
        "        print('swallowed', type(e).__name__)\n"
        "print('after the loop')\n"
    )
    out = tmp_path / "run"
    assert main(["run", *FAST, *LEAN, "-o", str(out), "--", str(script)]) == 0
    o = capsys.readouterr().out
    assert "swallowed" not in o and "after the loop" not in o and "warning" not in o
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["total_steps"] == LEAN_STEPS


def test_dash_m_runs_a_module_as_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SCRIPTS)
    out = tmp_path / "cnn"
    assert main(["run", *FAST, *LEAN, "-o", str(out), "--", "python", "-m", "cnn_bn", "9"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["script"]["module"] == "cnn_bn"
    assert m["script"]["file"] == str(SCRIPTS / "cnn_bn.py")
    assert m["script"]["argv"] == [str(SCRIPTS / "cnn_bn.py"), "9"]
    assert m["model"]["class"] == "__main__.Net"


def test_cpu_run_folder_meets_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU run parses like a collect run, and the report reads it as collect's CPU runs:
    its work operators stand in for kernels (docs/report.md, CPU runs)."""
    from tracekit.parse import load

    out = tmp_path / "mlp"
    rc, m, _, _ = _run(capsys, out, "mlp.py", lean=False)
    assert rc == 0 and m is not None
    t = load(out)
    assert t.manifest == m and t.steps["step"].tolist() == [1]
    assert main(["report", str(out), "--no-tensorboard"]) == 0
    printed = capsys.readouterr().out
    assert "CPU time per class" in printed and "CPU utilisation" in printed
    # memory by category from the category step, without --with-stack
    assert "Memory by category at the peak" in printed
    doc = json.loads((out / "report" / "summary.json").read_text())
    assert doc["device_kind"] == "cpu" and doc["measured_step_time_ms"] is not None
    cats = doc["memory"]["peak_by_model_category"]
    assert doc["memory"]["categories"] is True and cats["parameters"] == 6922 * 4
    assert cats["optimizer_state"] == 2 * 6922 * 4 + 6 * 4  # AdamW's moments and step
    # no ceilings (--no-ceilings): the CPU has no roofline, and the report says so
    assert not doc["device"]["peak_flops"] and any("no roofline" in n for n in doc["notes"])

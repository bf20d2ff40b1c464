"""Golden checks on the GPU fixtures of `tracekit run` (torchvision ResNet-50 and Hugging
Face GPT-2 trained by scripts tracekit never saw; made with benchmarks/gpu_run_scripts.sh
and benchmarks/trim_fixture.py). Skipped until those fixtures are in fixtures/
(`fixtures/<gpu>-run-resnet50-b64-bf16`, `fixtures/<gpu>-run-hf-gpt2s-b8-s128-bf16`).
The figures are the models' own: torchvision's ResNet-50 and HF's GPT-2 small."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STEPS = 5 + 20 + 3 + 1  # warm-up, timed, profiled (wait 1, warm-up 1, active 1), snapshot
# fixtures made since the light timeline pass and the category step (manifest "schedule")
PASSES_STEPS = 5 + 20 + 3 + 3 + 2 + 1


def _fixture(pattern: str) -> Path:
    found = sorted(FIXTURES.glob(pattern))
    if not found:
        pytest.skip(f"no fixtures/{pattern} yet (bash benchmarks/gpu_run_scripts.sh)")
    return found[0]


def _common(run: Path) -> dict[str, Any]:
    m: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "ok" and m["workload"] == "script"
    passes = m.get("schedule") is not None
    assert m["total_steps"] == m["schedule_steps"] == (PASSES_STEPS if passes else STEPS)
    if passes:
        arts = m["artifacts"]
        assert (run / arts["timeline_trace"]).is_file() and arts["timeline_trace_absent"] is None
        assert arts["memory_timeline_pass"] == "category step (with stacks)"
        assert m["metrics"]["timeline_step_time"]["n"] == 1
    assert m["device"]["type"] == "cuda" and m["config"]["step_marker"] == "optimizer"
    met = m["metrics"]
    assert met["step_time_ms"]["n"] == 20 and met["profiled_step_time"]["n"] == 1
    assert met["peak_allocated_bytes"] > met["avg_allocated_bytes"] > 0
    for point in ("after backward", "before the model's forward", "after the model's forward"):
        assert point in met["memory_method"]
    assert m["ceilings"]["matmul_flops"]["bf16"] > m["ceilings"]["matmul_flops"]["fp32"] > 0
    assert (run / "counters.csv").is_file() and m["counters"]["gemm"]["csv"]
    doc = json.loads(gzip.decompress((run / m["artifacts"]["trace"]).read_bytes()))
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len([e for e in steps if e.get("cat") == "user_annotation"]) == 1  # + its GPU copy
    return m


def _report(run: Path, tmp_path: Path) -> dict[str, Any]:
    from tracekit.cli import main

    assert main(["report", str(run), "-o", str(tmp_path / "rep"), "--no-tensorboard"]) == 0
    doc: dict[str, Any] = json.loads((tmp_path / "rep" / "summary.json").read_text())
    if json.loads((run / "manifest.json").read_text()).get("schedule"):
        # the light pass joined: idle, launch and overlap from it
        assert doc["timeline"]["source"] == "light", doc["timeline"]["reason"]
        assert doc["memory"]["categories"] is True
    return doc


def test_resnet50_run(tmp_path: Path) -> None:
    run = _fixture("*-run-resnet50-b64-bf16")
    m = _common(run)
    model = m["model"]
    assert model["class"] == "torchvision.models.resnet.ResNet"
    assert model["n_params"] == model["module_params"] == 25_557_032
    # 53 batch-norms over 26,560 channels: running mean and var (fp32), num_batches_tracked
    assert model["module_buffers_bytes"] == 26_560 * 2 * 4 + 53 * 8
    assert m["optimizer"]["classes"] == ["SGD"]
    assert m["optimizer"]["state_bytes"] == 25_557_032 * 4  # momentum buffers
    assert m["inputs"]["shape"] == [64, 3, 224, 224] and m["config"]["batch"] == 64
    assert m["config"]["tokens_per_step"] is None and m["metrics"]["tokens_per_s"] is None
    s = _report(run, tmp_path)
    assert s["measured_step_time_ms"] == m["metrics"]["step_time_ms"]["median"]
    assert s["tokens_per_step"] is None


def test_hf_gpt2_run(tmp_path: Path) -> None:
    run = _fixture("*-run-hf-gpt2s-b8-s128-bf16")
    m = _common(run)
    model = m["model"]
    assert model["class"] == "transformers.models.gpt2.modeling_gpt2.GPT2LMHeadModel"
    assert model["n_params"] == 124_439_808  # GPT-2 small, tied embeddings
    assert model["config_source"] == "GPT2LMHeadModel.config.to_dict()"
    assert (model["config"]["n_layer"], model["config"]["n_embd"]) == (12, 768)
    opt = m["optimizer"]
    assert opt["classes"] == ["AdamW"] and opt["n_tensors"] == 148
    assert opt["state_bytes"] == 2 * 124_439_808 * 4 + 148 * 4  # exp_avg, exp_avg_sq, step
    assert m["inputs"]["argument"] == "input_ids" and m["inputs"]["shape"] == [8, 128]
    assert (m["config"]["batch"], m["config"]["seq"]) == (8, 128)
    s = _report(run, tmp_path)
    assert s["tokens_per_step"] == 1024
    assert s["measured_tokens_per_s"] == pytest.approx(
        1024 / (m["metrics"]["step_time_ms"]["median"] / 1e3)
    )

"""Classes and FLOPs on the `tracekit run` GPU fixtures: a torchvision ResNet-50 (bf16,
channels_last, SGD) and a Hugging Face GPT-2 small (bf16, SDPA, AdamW), both trained by
scripts tracekit never saw on an H200 (fixtures/README.md). Hand-checked against the
models' published figures: ResNet-50 runs 4.09 G multiply-adds per 224² image
(torchvision's model card), GPT-2's matrix products 6 FLOPs per weight and token."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from tracekit.classify import classify
from tracekit.classify.result import Classification
from tracekit.parse import load

FIX = Path(__file__).parents[1] / "fixtures"
RESNET = FIX / "h200-run-resnet50-b64-bf16"
GPT2 = FIX / "h200-run-hf-gpt2s-b8-s128-bf16"


@cache
def _run(path: Path, bare: bool = False) -> Classification:
    if not path.is_dir():
        pytest.skip(f"{path.name} absent")
    return classify(load(next(path.glob("*.pt.trace.json.gz")) if bare else path))


def _step(r: Classification) -> pd.DataFrame:
    return r.kernels[r.kernels["step"] >= 0]


def test_resnet50_classes() -> None:
    r = _run(RESNET)
    k = _step(r)
    share = r.classes.set_index("class")["time_share_pct"].round(3)
    assert share["batchnorm"] == 42.756  # the largest class: NHWC batch-norm statistics
    assert share["convolution"] == 31.001
    assert share["activation"] == 9.317 and share["elementwise"] == 9.365  # relu; residual adds
    assert share["pooling"] == 4.449  # the stem's max pool (and its backward), the global mean
    assert share["gemm"] == 0.087  # the classifier head only
    assert share["optimizer"] == 2.574
    # channels_last end to end: cuDNN needs no NCHW<->NHWC transform
    assert share["layout"] == 0 and share["layernorm"] == 0
    assert r.classes.set_index("class").loc["batchnorm", "group"] == "normalization"
    conv_ops = k["op_name"].isin(["aten::cudnn_convolution", "aten::convolution_backward"])
    assert k.loc[conv_ops, "class"].value_counts().to_dict() == {"convolution": 201, "memset": 33}
    assert (k.loc[k["name"].str.contains("batch_norm"), "class"] == "batchnorm").all()
    assert set(k.loc[k["class"] == "gemm", "op_name"]) == {"aten::addmm", "aten::mm"}


def test_resnet50_convolution_flops_are_the_published_count() -> None:
    r = _run(RESNET)
    ops = r.ops
    fwd = ops.loc[ops["name"] == "aten::cudnn_convolution", "flops_model"].sum()
    bwd = ops.loc[ops["name"] == "aten::convolution_backward", "flops_model"].sum()
    macs_per_image = fwd / 2 / 64
    assert macs_per_image == 4_087_136_256  # torchvision: 4.09 GFLOPS (multiply-adds)
    # backward: data and weight gradients, each a forward's count, except the stem's data
    # gradient (the image needs none): 7·7·3·64 MACs at 112² outputs
    stem = 7 * 7 * 3 * 64 * 112 * 112
    assert bwd == 2 * fwd - 2 * 64 * stem
    # Nsight Compute's tensor-pipe count (counters.csv) within 11 % of the model
    agree = r.agreement().set_index("class")
    assert agree.loc["convolution", "flops_ratio"] == pytest.approx(1.109, abs=0.001)


def test_hf_gpt2_classes_and_flops() -> None:
    r = _run(GPT2)
    k = _step(r)
    share = r.classes.set_index("class")["time_share_pct"].round(3)
    assert share["gemm"] == 28.132
    assert share["attention"] == 2.525  # cuDNN SDPA, forward and backward
    assert share["layernorm"] == 3.064
    assert share["optimizer"] == 23.549  # foreach AdamW over 148 tensors
    assert share["layout"] == 0.787  # ViewBackward0's reshape of the attention output grad
    # HF's NewGELUActivation is written out (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))):
    # without module paths only its tanh reads as an activation, its pow/mul/add stay
    # element-wise
    assert set(k.loc[k["op_name"] == "aten::tanh", "class"]) == {"activation"}
    assert set(k.loc[k["op_name"] == "aten::pow", "class"]) == {"elementwise"}
    # every weight (12 blocks of 768·2304 + 768·768 + 2·768·3072, and the tied 50257·768
    # head): 6 FLOPs per weight and token (2 forward, 4 backward), 8·128 tokens
    weights = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) + 50257 * 768
    assert k.loc[k["class"] == "gemm", "flops_model"].sum() == 6 * weights * 1024
    # causal SDPA: 2·B·H·T²·(E+Ev)/2 forward, 2.5× that backward, 12 layers
    att = 2 * 8 * 12 * 128 * 128 * 128 * 0.5 * 3.5 * 12
    assert k.loc[k["class"] == "attention", "flops_model"].sum() == att


@pytest.mark.parametrize("path", [RESNET, GPT2], ids=["resnet50", "hf-gpt2"])
def test_bare_run_traces_leave_little_unknown(path: Path) -> None:
    """The trace file alone: the foreach SGD/AdamW lists are sized from AccumulateGrad."""
    k = _step(_run(path, bare=True))
    unknown = k.loc[k["bound"] == "unknown", "dur"].sum() / k["dur"].sum()
    assert unknown < 0.0001
    full = _step(_run(path))
    opt, want = (x.loc[x["class"] == "optimizer", "bytes_model"].sum() for x in (k, full))
    assert opt == pytest.approx(want, rel=1e-12)

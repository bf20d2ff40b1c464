"""Class shares on the two public CNN traces (``../shared/external-traces``, not in the
repo; skipped where absent): a ResNet training step on a V100 (cuDNN convolutions with
Winograd/FFT/implicit-GEMM kernels, cuDNN batch norm, max pooling, SGD) and an AlexNet
forward on an A100. Figures checked by hand against the traces' kernel tables
(``tracekit classify TRACE`` / the kernel_roofline table): batch norm is ``batchnorm``,
never ``layernorm``; every kernel a convolution operator launches is ``convolution``,
except cuDNN's NCHW↔NHWC transforms (``layout``) and its memsets; only the classifier
head is ``gemm``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from tracekit.classify import classify
from tracekit.classify.classes import classify_kernels
from tracekit.parse import load

EXTERNAL = Path(__file__).parents[1].parent / "shared" / "external-traces"
if not EXTERNAL.is_dir():
    EXTERNAL = Path("/work/shared/external-traces")
V100 = EXTERNAL / "v100_rank0_ns_resolution.pt.trace.json.gz"
A100 = EXTERNAL / "a100_alexnet_train.pt.trace.json.gz"


@cache
def _kernels(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not path.is_file():
        pytest.skip(f"{path.name} absent")
    r = classify(load(path))
    return r.kernels, r.classes.set_index("class")


def _share(k: pd.DataFrame, mask: pd.Series) -> float:
    return 100.0 * float(k.loc[mask, "dur"].sum()) / float(k["dur"].sum())


def test_v100_resnet_batch_norm_is_batchnorm_not_layernorm() -> None:
    k, classes = _kernels(V100)
    bn = k["name"].str.contains("cudnn::bn_")  # bn_fw_tr_1C11_*, bn_bw_1C11_*
    assert bn.sum() == 530
    assert (k.loc[bn, "class"] == "batchnorm").all()
    assert (k.loc[k["class"] == "batchnorm", "name"].str.contains("cudnn::bn_")).all()
    assert classes.loc["layernorm", "kernel_count"] == 0
    assert classes.loc["batchnorm", "time_share_pct"] == pytest.approx(18.212, abs=0.001)
    assert _share(k, bn) == pytest.approx(18.212, abs=0.001)


def test_v100_resnet_convolutions_are_convolution() -> None:
    k, classes = _kernels(V100)
    under_conv = k["op_name"].isin(["aten::cudnn_convolution", "aten::convolution_backward"])
    got = k.loc[under_conv, "class"].value_counts().to_dict()
    # implicit-GEMM, Winograd, FFT, dgrad/wgrad engines and even volta_sgemm_* under a
    # convolution operator; cuDNN's layout transforms and memsets apart
    assert got == {"convolution": 1905, "memset": 145, "layout": 35}
    lay = k[k["class"] == "layout"]
    assert lay["name"].str.contains(r"cudnn::ops::(?:nchwToNhwc|nhwcToNchw)Kernel").all()
    assert (k.loc[k["class"] == "convolution", "op_name"].isin(
        ["aten::cudnn_convolution", "aten::convolution_backward"]
    )).all()  # fmt: skip
    assert classes.loc["convolution", "time_share_pct"] == pytest.approx(63.507, abs=0.001)
    assert classes.loc["layout", "time_share_pct"] == pytest.approx(0.173, abs=0.001)
    # the fully connected head: addmm forward, two mm and a bias sum backward
    gemm = k[k["class"] == "gemm"]
    assert set(gemm["op_name"]) == {"aten::addmm", "aten::mm"}
    assert classes.loc["gemm", "time_share_pct"] == pytest.approx(0.082, abs=0.001)


def test_v100_resnet_pooling() -> None:
    k, classes = _kernels(V100)
    pool = k[k["class"] == "pooling"]
    # max pool forward and backward, and the global average pool (adaptive_avg_pool2d to
    # 1×1 runs a mean: the composite operator claims it)
    assert set(pool["op_name"]) == {
        "aten::max_pool2d_with_indices",
        "aten::max_pool2d_with_indices_backward",
        "aten::mean",
    }
    assert classes.loc["pooling", "time_share_pct"] == pytest.approx(1.481, abs=0.001)
    assert not k.loc[k["class"] == "reduction", "name"].str.contains("pool").any()


def test_a100_alexnet_classes() -> None:
    k, classes = _kernels(A100)
    conv = k["op_name"] == "aten::cudnn_convolution"
    assert k.loc[conv, "class"].value_counts().to_dict() == {
        "convolution": 18,
        "layout": 12,
        "memset": 1,
    }
    share = classes["time_share_pct"].round(3)
    assert share["convolution"] == 7.695  # scudnn, xmma fprop implicit GEMM, FFT, gcgemm
    assert share["gemm"] == 4.018  # the three fully connected layers (addmm)
    assert share["layout"] == 0.418  # nchwToNhwcKernel around the TF32 implicit GEMM
    assert share["pooling"] == 1.382  # max_pool_forward_nchw, adaptive_average_pool
    assert share["memcpy"] == 83.838  # the pageable host-to-device input copies
    assert set(k.loc[k["class"] == "gemm", "op_name"]) == {"aten::addmm"}


@pytest.mark.parametrize("path", [V100, A100], ids=["v100", "a100"])
def test_kernel_names_alone_keep_batch_norm_convolution_and_layout(path: Path) -> None:
    """Without operators (a GPU-only trace) the kernel names decide: batch norm, pooling
    kernels, layout transforms and cuDNN's own convolution kernels keep their classes; the
    cuBLAS kernels cuDNN borrows for a convolution (``volta_sgemm_*``, the FFT path's
    complex ``ampere_gcgemm_*``) read as gemm, the global average pool's mean as a
    reduction."""
    k, _ = _kernels(path)
    by_name = classify_kernels(k[["name", "kind"]], None)["class"]
    keep = k["class"].isin(["batchnorm", "layout", "memcpy", "memset"]) | (
        (k["class"] == "pooling") & k["name"].str.contains("pool")
    )
    assert (by_name[keep] == k.loc[keep, "class"]).all()
    conv = k["class"] == "convolution"
    blas = k["name"].str.contains(r"^(?:volta|ampere)_(?:s|gc)gemm")
    assert (by_name[conv & ~blas] == "convolution").all()
    assert (by_name[conv & blas] == "gemm").all() and (conv & blas).any()

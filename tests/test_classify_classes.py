"""Class rules: real kernel names (CUDA, ROCm, Triton) and the innermost-operator context."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._synth import Builder
from tracekit.classify import classes as C
from tracekit.classify.families.registry import CLASSES
from tracekit.classify.inductor import fused_ops

DATA = Path(__file__).parent / "data"


def _names() -> list[tuple[str, str, str]]:
    rows = []
    for line in (DATA / "kernel_names.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cls, src, name = line.split("\t")
        rows.append((cls, src, name))
    return rows


NAMES = _names()


def test_names_file_covers_every_platform_and_class() -> None:
    srcs = " ".join(s for _, s, _ in NAMES)
    for platform in ("A100", "V100", "H100", "MI300", "MI250", "B200", "Inductor"):
        assert platform in srcs, platform
    classes = {c for c, _, _ in NAMES}
    assert classes >= {
        "gemm",
        "attention",
        "softmax",
        "layernorm",
        "activation",
        "elementwise",
        "reduction",
        "embedding",
        "loss",
        "optimizer",
        "communication",
        "convolution",
        "rmsnorm",
        "batchnorm",
        "groupnorm",
        "pooling",
        "layout",
        "moe",
    }
    assert len(NAMES) > 200


@pytest.mark.parametrize(
    ("expected", "source", "name"),
    NAMES,
    ids=[f"{i}:{n[:40]}" for i, (_, _, n) in enumerate(NAMES)],
)
def test_real_kernel_name(expected: str, source: str, name: str) -> None:
    assert C.classify_kernel_name(name) == expected


def test_kind_decides_copies_and_sets() -> None:
    assert C.classify_kernel_name("Memcpy DtoD (Device -> Device)", "memcpy") == "memcpy"
    assert C.classify_kernel_name("anything", "memset") == "memset"


def test_fused_op_tokens() -> None:
    assert fused_ops("triton_per_fused__softmax_add_eq_masked_fill_mul_14") == [
        "_softmax",
        "add",
        "eq",
        "masked_fill",
        "mul",
    ]
    assert fused_ops("triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1") == [
        "_unsafe_view",
        "add",
        "mean",
        "mul",
        "pow",
        "rsqrt",
    ]
    assert fused_ops("triton_red_fused_native_layer_norm_native_layer_norm_backward_82") == [
        "native_layer_norm",
        "native_layer_norm_backward",
    ]
    assert fused_ops("ampere_sgemm_32x32_sliced1x4_tn") is None


def test_fused_kernel_named_by_dominant_op() -> None:
    # RMSNorm decomposed into mean/pow/rsqrt is a norm, not a reduction; LayerNorm has var_mean
    assert C.classify_kernel_name("triton_red_fused_add_mean_mul_pow_rsqrt_0") == "rmsnorm"
    assert C.classify_kernel_name("triton_red_fused_add_rsqrt_var_mean_0") == "layernorm"
    assert C.classify_kernel_name("triton_red_fused_add_sum_0") == "reduction"
    assert C.classify_kernel_name("triton_poi_fused_add_mul_0") == "elementwise"
    assert C.classify_kernel_name("triton_tem_fused_addmm_gelu_0") == "gemm"
    # older Inductor names carry no op list: by kernel kind
    assert C.classify_kernel_name("triton__0d1d2de") == "elementwise"


GEMM_BF16 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
REDUCE = (
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()("
    "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(…)"
)
CAST = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(…)"
)
CLAMP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::"
    "detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}(…)"
)
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
)


def _classify(b: Builder) -> dict[int, tuple[str, str, object]]:
    t = b.trace()
    out = C.classify_kernels(t.kernels, t.ops)
    return {
        int(k): (c, s, a)
        for k, c, s, a in zip(
            t.kernels["kernel_id"],
            out["class"],
            out["class_source"],
            out["autograd_node"],
            strict=True,
        )
    }


def test_innermost_operator_decides_in_addmm_backward() -> None:
    b = Builder()
    ev = b.op("autograd::engine::evaluate_function: AddmmBackward0")
    node = b.op("AddmmBackward0", ev)
    mm = b.op("aten::mm", node)
    s = b.op("aten::sum", node)
    k_mm = b.kernel(GEMM_BF16, mm)
    k_sum = b.kernel(REDUCE, s)
    got = _classify(b)
    assert got[k_mm] == ("gemm", "op", "AddmmBackward0")
    assert got[k_sum] == ("reduction", "op", "AddmmBackward0")  # a bias gradient, not GEMM


def test_cast_under_linear_is_elementwise() -> None:
    b = Builder()
    lin = b.op("aten::linear")
    to = b.op("aten::to", lin)
    tc = b.op("aten::_to_copy", to)
    cp = b.op("aten::copy_", tc)
    mat = b.op("aten::matmul", lin)
    mm = b.op("aten::mm", mat)
    k_cast, k_mm = b.kernel(CAST, cp), b.kernel(GEMM_BF16, mm)
    got = _classify(b)
    assert got[k_cast][0] == "elementwise"
    assert got[k_mm][0] == "gemm"


def test_layer_norm_backward_makes_gamma_beta_kernel_layernorm() -> None:
    b = Builder()
    node = b.op("NativeLayerNormBackward0")
    ln = b.op("aten::native_layer_norm_backward", node)
    k1 = b.kernel(
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel1<float>("
        "long, long, long, float const*, float const*, float const*, float*, float*)",
        ln,
    )
    k2 = b.kernel(FILL, ln)  # a generic kernel launched by the same op
    got = _classify(b)
    assert got[k1][0] == got[k2][0] == "layernorm"


def test_relu_decides_over_its_inner_clamp() -> None:
    b = Builder()
    relu = b.op("aten::relu_")
    clamp = b.op("aten::clamp_min_", relu)
    k = b.kernel(CLAMP, clamp)
    assert _classify(b)[k] == ("activation", "ancestor", None)


def test_optimizer_region_claims_everything_inside() -> None:
    b = Builder()
    step = b.op("Optimizer.step#AdamW.step", category="user_annotation")
    fused = b.op("aten::_fused_adamw_", step)
    cp = b.op("aten::copy_", step)
    k1 = b.kernel(
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::"
        "(anonymous namespace)::FusedAdamMathFunctor<float, 4>, …>(…)",
        fused,
    )
    k2 = b.kernel(CAST, cp)
    got = _classify(b)
    assert got[k1][0] == "optimizer"
    assert got[k2][:2] == ("optimizer", "ancestor")


def test_communication_and_copies() -> None:
    b = Builder()
    ar = b.op("c10d::allreduce_")
    k1 = b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ar)
    k2 = b.kernel("Memcpy DtoD (Device -> Device)", ar, kind="memcpy", nbytes=1024)
    got = _classify(b)
    assert got[k1][0] == "communication"
    assert got[k2][:2] == ("memcpy", "kind")


def test_fused_attention_claims_its_fill_kernels() -> None:
    b = Builder()
    att = b.op("aten::_efficient_attention_backward")
    z = b.op("aten::zeros", att)
    fill = b.op("aten::fill_", z)
    k = b.kernel(FILL, fill)
    assert _classify(b)[k][0] == "attention"


def test_triton_op_and_kernel() -> None:
    b = Builder()
    region = b.op("Torch-Compiled Region: 0/0")
    tri = b.op("triton_per_fused__softmax_add_eq_masked_fill_mul_14", region)
    k = b.kernel("triton_per_fused__softmax_add_eq_masked_fill_mul_14", tri)
    t = b.trace()
    out = C.classify_kernels(t.kernels, t.ops)
    assert out.loc[k, "class"] == "softmax"
    assert out.loc[k, "fused_ops"] == "_softmax,add,eq,masked_fill,mul"


def test_specific_kernel_name_beats_a_distant_ancestor() -> None:
    b = Builder()
    lin = b.op("aten::linear")
    odd = b.op("aten::some_custom_op", lin)  # no rule
    k = b.kernel(
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, "
        "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(…)",
        odd,
    )
    assert _classify(b)[k][:2] == ("softmax", "kernel")


def test_without_operators_kernel_names_decide() -> None:
    b = Builder()
    k1 = b.kernel(GEMM_BF16)
    k2 = b.kernel("some_unknown_kernel_name")
    t = b.trace()
    out = C.classify_kernels(t.kernels, None)
    assert list(out["class"]) == ["gemm", "other"]
    assert list(out["class_source"]) == ["kernel", "none"]
    assert k1 == 0 and k2 == 1


def test_every_rule_names_a_class_and_compiles() -> None:
    frame = C.rules_frame()
    assert set(frame["class"]) <= set(CLASSES)
    assert set(frame["target"]) == {"op", "kernel", "fused"}
    assert (frame["note"].str.len() > 0).all()


def test_docs_list_the_rule_table() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "classify.md").read_text()
    assert C.rules_markdown() in doc, "docs/classify.md is out of date: paste rules_markdown()"

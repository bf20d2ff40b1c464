"""The CNN, LLaMA and MoE op families: their rules in operator context, their cost models
(norms, pooling, grouped GEMM, routing; by hand), FLOPs of layout kernels inside a
convolution, and optimizer lists sized from a bare trace's AccumulateGrad calls."""

from __future__ import annotations

import json
import math

import pytest

from tests._synth import Builder
from tracekit.classify import classes as C
from tracekit.classify import classify
from tracekit.classify.costs import op_cost
from tracekit.classify.families.registry import CLASS_GROUPS, CLASSES
from tracekit.classify.params import trace_params
from tracekit.summary.classes import ORDER

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(…)"
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps<float>>>(…)"
COPY = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>(…)"
)
XMMA_FPROP = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
NCHW2NHWC = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(…)"


def _classes(b: Builder) -> dict[int, tuple[str, str]]:
    t = b.trace()
    out = C.classify_kernels(t.kernels, t.ops)
    return {
        int(k): (c, s)
        for k, c, s in zip(t.kernels["kernel_id"], out["class"], out["class_source"], strict=True)
    }


def test_convolution_owns_its_kernels_but_not_its_layout_transforms() -> None:
    b = Builder()
    conv = b.op("aten::conv2d")
    cud = b.op(
        "aten::cudnn_convolution", b.op("aten::_convolution", b.op("aten::convolution", conv))
    )
    k_fprop = b.kernel(XMMA_FPROP, cud)
    k_sgemm = b.kernel("volta_sgemm_64x64_nn", cud)  # cuBLAS borrowed by cuDNN
    k_layout = b.kernel(NCHW2NHWC, cud)
    bwd = b.op("aten::convolution_backward", b.op("ConvolutionBackward0"))
    k_dgrad = b.kernel("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(…)", bwd)
    got = _classes(b)
    assert got[k_fprop] == got[k_sgemm] == ("convolution", "op")
    assert got[k_layout] == ("layout", "kernel")  # a named transform beats the operator
    assert got[k_dgrad] == ("convolution", "op")


def test_composite_norms_claim_their_decomposed_kernels() -> None:
    b = Builder()
    rms = b.op("aten::_fused_rms_norm", b.op("aten::rms_norm"))  # composite on CPU
    k_pow = b.kernel(ELEMENTWISE, b.op("aten::pow", rms))
    k_mean = b.kernel(REDUCE, b.op("aten::mean", rms))
    bn = b.op(
        "aten::cudnn_batch_norm", b.op("aten::_batch_norm_impl_index", b.op("aten::batch_norm"))
    )
    k_bn = b.kernel(
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(…)", bn
    )
    k_cast = b.kernel(ELEMENTWISE, b.op("aten::copy_", b.op("aten::to", bn)))
    inst = b.op("aten::instance_norm")
    k_inst = b.kernel(
        "void at::native::batch_norm_collect_statistics_kernel<…>(…)",
        b.op("aten::batch_norm", inst),
    )
    gn = b.op("aten::native_group_norm", b.op("aten::group_norm"))
    k_gn = b.kernel(
        "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, …)", gn
    )
    got = _classes(b)
    assert got[k_pow][0] == got[k_mean][0] == "rmsnorm"
    assert got[k_bn][0] == got[k_cast][0] == "batchnorm"
    assert got[k_inst][0] == "groupnorm"  # the nearest composite (instance_norm) decides
    assert got[k_gn][0] == "groupnorm"


def test_layout_regions_pooling_and_routing() -> None:
    b = Builder()
    mm = b.op("aten::matmul")
    k_t = b.kernel(COPY, b.op("aten::copy_", b.op("aten::clone", b.op("aten::reshape", mm))))
    k_c = b.kernel(COPY, b.op("aten::copy_", b.op("aten::clone", b.op("aten::contiguous"))))
    k_cast = b.kernel(COPY, b.op("aten::copy_", b.op("aten::_to_copy", b.op("aten::to"))))
    step = b.op("Optimizer.step#AdamW.step", category="user_annotation")
    k_opt = b.kernel(COPY, b.op("aten::copy_", b.op("aten::contiguous", step)))
    k_pool = b.kernel(REDUCE, b.op("aten::mean", b.op("aten::adaptive_avg_pool2d")))
    k_topk = b.kernel(
        "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(…)", b.op("aten::topk")
    )
    k_add = b.kernel(
        "void at::native::indexFuncLargeIndex<float, long, …>(…)", b.op("aten::index_add_")
    )
    k_gmm = b.kernel("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN", b.op("aten::_grouped_mm"))
    got = _classes(b)
    assert got[k_t] == ("layout", "ancestor") and got[k_c] == ("layout", "ancestor")
    assert got[k_cast][0] == "elementwise"  # a cast is not a layout transform
    assert got[k_opt][0] == "optimizer"  # the optimizer region is stronger
    assert got[k_pool][0] == "pooling"
    assert got[k_topk][0] == got[k_add][0] == "moe"
    assert got[k_gmm][0] == "gemm"  # expert GEMMs run on the matrix pipes


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("triton_per_fused_native_batch_norm_backward_relu_3", "batchnorm"),
        ("triton_red_fused__native_batch_norm_legit_functional_convolution_1", "convolution"),
        ("triton_red_fused_native_group_norm_0", "groupnorm"),
        ("triton_poi_fused_max_pool2d_with_indices_relu_2", "pooling"),
        ("triton_poi_fused_clone_permute_5", "layout"),
        ("triton_tem_fused_convolution_relu_0", "convolution"),
        ("triton_tem_fused_addmm_gelu_0", "gemm"),
        ("triton_poi_fused__to_copy_clone_5", "elementwise"),
        ("void vllm::moe::moe_align_block_size_kernel<int>(…)", "moe"),
        ("cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "convolution"),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(…)", "other"),
        (
            "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float>",
            "convolution",
        ),
        (
            "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47Gridwise",
            "convolution",
        ),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, float>",
            "pooling",
        ),
    ],
)
def test_kernel_names(name: str, cls: str) -> None:
    assert C.classify_kernel_name(name) == cls


def test_registry_groups_and_report_order() -> None:
    norms = [c for c in CLASSES if CLASS_GROUPS[c] == "normalization"]
    assert norms == ["layernorm", "rmsnorm", "batchnorm", "groupnorm"]
    assert CLASS_GROUPS["convolution"] == "convolution"
    # the report's order: softmax, layernorm, gemm first, then the registry's
    assert ORDER[:5] == ("softmax", "layernorm", "gemm", "convolution", "attention")
    assert set(ORDER) == set(CLASSES)


# --- cost models ----------------------------------------------------------------------


def cost(name: str, dims: list[object], types: list[str], concrete: list[str] | None = None):  # type: ignore[no-untyped-def]
    c = op_cost(
        name, json.dumps(dims), json.dumps(types), json.dumps(concrete) if concrete else None
    )
    assert c is not None
    return c


F32 = "float"


def test_batch_norm_forward_and_backward_by_hand() -> None:
    x = [8, 16, 10, 10]  # 12,800 elements, 16 channels
    c = cost("aten::native_batch_norm", [x, [16], [16], [16], [16], [], [], []], [F32] * 5)
    assert c.flops == (6 + 2) * 12_800  # statistics and normalise 6, affine 2 per element
    assert c.bytes == 2 * 12_800 * 4 + 2 * 16 * 4 + 2 * 16 * 4  # x in, y out, γ β, stats
    mask = ["", "", "", "", "", "", "", "True", "1e-05", "[True, False, False]"]
    c = cost(
        "aten::native_batch_norm_backward", [x, x, [16], [16], [16], [16], [16]], [F32] * 7, mask
    )
    assert c.flops == 10 * 12_800  # dx only
    assert c.bytes == 2 * 12_800 * 4 + 16 * 16 + 12_800 * 4  # dy, x, 4 stats read; dx written


def test_group_and_rms_norm_by_hand() -> None:
    x = [2, 8, 4, 4]  # 256 elements, 2 groups
    c = cost(
        "aten::native_group_norm",
        [x, [8], [8], [], [], [], [], []],
        [F32, F32, F32, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
        ["", "", "", "2", "8", "16", "2", "1e-05"],
    )
    assert c.flops == 8 * 256
    assert c.bytes == 2 * 256 * 4 + 2 * 8 * 4 + 2 * (2 * 2) * 4  # stats per (sample, group)
    g = [4, 64]
    c = cost(
        "aten::_fused_rms_norm_backward",
        [g, g, [], [4, 1], [64], []],
        ["c10::BFloat16", "c10::BFloat16", "", F32, "c10::BFloat16", ""],
        ["", "", "[64]", "", "", "[True, False]"],
    )
    assert c.flops == 5 * 256  # dx only
    assert c.bytes == 256 * 2 * 2 + 4 * 4 + 64 * 2 + 256 * 2  # dy, x, rstd, w read; dx


def test_pooling_by_hand() -> None:
    x = [2, 3, 8, 8]  # 384 elements, 6 planes
    # 3x3 window, stride 2: 3 outputs per axis, 4 with ceil_mode (the last, partial window
    # starts at 6, inside the input)
    conc = ["", "[3, 3]", "[2, 2]", "[0, 0]", "[1, 1]", "False"]
    types = [F32] + [""] * 5
    c = cost("aten::max_pool2d_with_indices", [x, [], [], [], [], []], types, conc)
    assert c.flops == 6 * 9 * 9  # 6 planes × 9 outputs × 9 comparisons
    assert c.bytes == 384 * 4 + 54 * 4 + 54 * 8  # x, y, int64 indices
    c = cost("aten::max_pool2d_with_indices", [x, [], [], [], [], []], types, [*conc[:5], "True"])
    assert c.flops == 6 * 16 * 9
    c = cost(
        "aten::avg_pool2d_backward",
        [[2, 3, 3, 3], x, [], [], [], [], [], []],
        [F32, F32] + [""] * 6,
        ["", "", "[3, 3]", "[2, 2]", "[0, 0]", "False", "True", ""],
    )
    assert c.flops == 54 * 9 and c.bytes == (54 + 384) * 4
    c = cost("aten::adaptive_max_pool2d", [x, []], [F32, ""], ["", "[1, 1]"])
    assert c.flops == 384 and c.bytes == 384 * 4 + 6 * 4 + 6 * 8


def test_grouped_gemm_and_routing_by_hand() -> None:
    # 512 routed tokens × 256 features through 8 experts of 256 → 1024
    c = cost(
        "aten::_grouped_mm", [[512, 256], [8, 256, 1024], [8]], ["c10::BFloat16"] * 2 + ["int"]
    )
    assert c.flops == 2 * 512 * 256 * 1024
    assert c.bytes == (512 * 256 + 8 * 256 * 1024 + 512 * 1024) * 2 + 8 * 4
    # the weight gradient: x^T [256, 512] · dy [512, 1024], ragged along K → [8, 256, 1024]
    c = cost("aten::_grouped_mm", [[256, 512], [512, 1024], [8]], ["c10::BFloat16"] * 2 + ["int"])
    assert c.flops == 2 * 256 * 512 * 1024
    c = cost(
        "aten::topk",
        [[4096, 64], [], [], [], []],
        [F32, "", "", "", ""],
        ["", "2", "-1", "True", "True"],
    )
    assert c.flops == 4096 * 64 and c.bytes == 4096 * 64 * 4 + 4096 * 2 * (4 + 8)
    c = cost(
        "aten::index_add_",
        [[1024, 256], [], [512], [512, 256], []],
        [F32, "", "long int", F32, ""],
        ["", "0", "", "", "1"],
    )
    assert c.flops == 512 * 256 and c.bytes == 3 * 512 * 256 * 4 + 512 * 8


# --- layout kernels inside a convolution carry bytes, not FLOPs -------------------------


def test_layout_kernels_take_no_convolution_flops() -> None:
    b = Builder()
    conv = b.op(
        "aten::cudnn_convolution",
        dims=[[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], [], [], []],
        types=["c10::BFloat16"] * 2 + [""] * 7,
        concrete=["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"],
    )
    k_conv = b.kernel(XMMA_FPROP, conv, dur=900)
    k_layout = b.kernel(NCHW2NHWC, conv, dur=100)
    r = classify(b.trace())
    k = r.kernels.set_index("kernel_id")
    total = 2 * 8 * 64 * 56 * 56 * 64 * 9
    assert k.loc[k_conv, "flops"] == total  # all of the convolution's FLOPs
    assert k.loc[k_layout, "flops"] == 0
    nbytes = (8 * 64 * 56 * 56 * 2 + 64 * 64 * 9) * 2
    assert k.loc[k_layout, "bytes"] == pytest.approx(0.1 * nbytes)  # its share by duration
    assert k.loc[k_layout, "bound"] == "memory-bound"
    assert k.loc[k_conv, "bound"] == "compute-bound"


# --- optimizer lists sized from the trace -----------------------------------------------

MTA = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
    "TernaryOpScalarFunctor<float, 2, 2, 0>, at::native::LerpFunctor<float>, float>(…)"
)
PARAMS = [[1000, 300], [300], [70_000], [65_536, 2]]  # blocks: 5, 1, 2, 2 → 10


def _param_trace(passes: int = 1, groups: list[list[int]] | None = None):  # type: ignore[no-untyped-def]
    """A bare trace: AccumulateGrad per parameter per backward pass, then a foreach lerp
    per parameter group whose multi_tensor_apply kernels ran the group's blocks."""
    b = Builder()
    for _ in range(passes):
        for shape in PARAMS:
            node = b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")
            b.op("torch::autograd::AccumulateGrad", node, dims=[shape], types=[F32])
    step = b.op("Optimizer.step#AdamW.step", category="user_annotation")
    for members in groups or [list(range(len(PARAMS)))]:
        blocks = sum(math.ceil(math.prod(PARAMS[i]) / 65_536) for i in members)
        lerp = b.op(
            "aten::_foreach_lerp_",
            step,
            dims=[[], [], []],
            types=["TensorList", "TensorList", "Scalar"],
            concrete=["", "", "0.1"],
        )
        b.kernel(MTA, lerp, grid=(blocks, 1, 1))
    return b.trace()


def test_trace_params_candidates() -> None:
    p = trace_params(_param_trace().ops)
    assert p is not None and p.itemsize == 4
    n_all = 300_000 + 300 + 70_000 + 131_072
    assert p.by_blocks[10] == (n_all, "parameters")
    assert p.by_blocks[7] == (300_000 + 131_072, "parameters with 2+ dims")
    # the 1-d parameters: 300 + 70,000 elements in 1 + 2 blocks
    assert p.by_blocks[3] == (70_300, "parameters with < 2 dims")
    # two micro-batches: AccumulateGrad runs twice per parameter, the lists hold one copy
    p2 = trace_params(_param_trace(passes=2).ops)
    assert p2 is not None and p2.by_blocks[10] == (n_all, "parameters")
    assert p2.by_blocks[20][0] == 2 * n_all  # the k = 1 reading, told apart by the blocks


def test_a_list_of_parameters_under_one_chunk_each_is_not_sized() -> None:
    b = Builder()
    for shape in ([10, 10], [5]):
        b.op("torch::autograd::AccumulateGrad", dims=[shape], types=[F32])
    p = trace_params(b.trace().ops)
    assert p is not None and p.by_blocks == {}  # 2 blocks: as many as 2 scalar step counts


@pytest.mark.parametrize("groups", [None, [[0, 3], [1, 2]]], ids=["one group", "decay groups"])
def test_bare_trace_optimizer_lists_get_the_parameters(groups: list[list[int]] | None) -> None:
    t = _param_trace(groups=groups)
    r = classify(t)
    opt = r.kernels[r.kernels["class"] == "optimizer"]
    assert (opt["bound"] == "memory-bound").all()
    sizes = [300_000 + 131_072, 300 + 70_000] if groups else [sum(map(math.prod, PARAMS))]
    # lerp: reads two lists, writes one, 4 B from the kernel names
    assert list(opt["bytes"]) == [3 * n * 4 for n in sizes]
    assert opt["cost_note"].str.contains("from the trace's AccumulateGrad calls").all()
    assert any("AccumulateGrad" in n for n in r.notes)


def test_without_accumulate_grad_the_lists_stay_unknown() -> None:
    t = _param_trace()
    t.ops = t.ops[~t.ops["name"].str.contains("AccumulateGrad")]
    r = classify(t)
    assert (r.kernels["bound"] == "unknown").all()

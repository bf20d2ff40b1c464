"""GEMM: matrix products and convolutions (tensor contractions: implicit GEMM, Winograd,
FFT), and the library kernels that run them (cuBLAS/cuBLASLt, CUTLASS, rocBLAS/Tensile,
hipBLASLt, Composable Kernel, cuDNN, MIOpen).

Costs: ``2·M·N·K`` (+ ``M·N`` per bias/epilogue); convolutions
``2·N·Cout·∏out·(Cin/groups)·∏kernel`` (+ bias), backward by its ``output_mask``.
"""

from __future__ import annotations

from tracekit.classify.families.family import P_NORMAL, ClassSpec, Family, Rule, aten

_CONV = (
    r"conv\dd",
    r"conv_transpose\dd",
    "convolution",
    "_convolution",
    r"cudnn_convolution(?:_transpose|_relu|_add_relu)?",
    r"miopen_(?:depthwise_)?convolution(?:_transpose)?",
    "mkldnn_convolution",
    r"convolution_backward\w*",
    r"cudnn_convolution\w*_backward\w*",
    r"_slow_conv2d_\w+",
    r"slow_conv\w+",
    r"_conv_depthwise2d\w*",
    r"conv_depthwise\dd\w*",
)
# Also the operators whose fp32 math follows cuDNN's TF32 setting (devices.pipe_for).
CONVOLUTION_OPS = Rule(
    aten(*_CONV),
    "op",
    "gemm",
    P_NORMAL,
    "convolutions: tensor contractions (implicit GEMM, Winograd, FFT), counted as gemm",
)

RULES: tuple[Rule, ...] = (
    Rule(
        aten(
            "mm",
            "addmm",
            "bmm",
            "baddbmm",
            "addbmm",
            "matmul",
            "linear",
            "mv",
            "addmv",
            "dot",
            "vdot",
            "_addmm_activation",
            "_scaled_mm",
            "_int_mm",
            "einsum",
            "tensordot",
            "bilinear",
            "linear_backward",
            "_grouped_mm",
            "_scaled_grouped_mm",
        ),
        "op",
        "gemm",
        P_NORMAL,
        "matrix products (and their backward pieces: mm, bmm)",
    ),
    CONVOLUTION_OPS,
    Rule(
        r"(?i)gemm|gemv|Cijk_|nvjet|xmma|cutlass_cudnn|cublas|hipblaslt|rocblas|tensile"
        r"|splitKreduce|wvSplitK|igemm_|winograd|implicit_?gemm|scudnn|hcudnn|wgrad|dgrad"
        r"|fprop|conv2d|conv3d|convolution|_conv_|naive_conv|fft2d|fft_|^bmm_|matmul"
        r"|cask_cudnn|cudnn::cnn|cudnn::detail::(?:dgrad|wgrad)|epilogue::impl",
        "kernel",
        "gemm",
        P_NORMAL,
        "cuBLAS(Lt)/CUTLASS/nvjet/xmma, rocBLAS/Tensile Cijk_, hipBLASLt, CK, MIOpen igemm, "
        "cuDNN conv (implicit GEMM, Winograd, FFT) and GEMM epilogue/split-K kernels",
    ),
    Rule(
        r"^(?:void )?ck(?:_tile)?::.*(?:[Gg]emm|[Cc]onv)|_ZN2ck\w*(?:[Gg]emm|[Cc]onv)",
        "kernel",
        "gemm",
        P_NORMAL,
        "Composable Kernel GEMM/convolution (demangled or mangled)",
    ),
)

FUSED_RULES: tuple[Rule, ...] = (
    Rule(r"^<tem>", "fused", "gemm", 100, "triton_tem_*: Inductor GEMM/conv templates"),
    Rule(
        r"(?:^| )(?:mm|addmm|bmm|baddbmm|_scaled_mm|convolution|convolution_backward)(?: |$)",
        "fused",
        "gemm",
        90,
        "a matrix product fused with its epilogue",
    ),
)

FAMILY = Family(
    "gemm",
    classes=(ClassSpec("gemm", matrix=True),),
    rules=RULES,
    fused_rules=FUSED_RULES,
    fused_vocab=("convolution_backward", "_scaled_mm"),
    convolution_ops=CONVOLUTION_OPS,
)

"""What `tracekit report` classes on CPU runs of the held-in user scripts: the one place
these expectations live (tests/test_run_script.py and tests/test_report_cpu.py read them).

Per script: the work operators per profiled step of each class that has any (the report's
``classes.parquet``: ``kernel_count``, for classes with time), and the class of the key
operators (``operators.parquet``: every row of that operator name). :data:`PROFILE_LOOP`:
the same for the ``tracekit.profile()`` loop of tests/test_report_cpu.py (Linear-ReLU-Linear,
MSE loss, Adam). A convolution is ``convolution``, a batch-norm ``batchnorm``, pooling
``pooling``, a ``contiguous`` copy ``layout`` (tracekit/classify/families/).
"""

from __future__ import annotations

SCRIPTS: dict[str, dict[str, dict[str, int] | dict[str, str]]] = {
    "mlp.py": {
        "classes": {
            "softmax": 3, "gemm": 11, "activation": 6, "elementwise": 9, "reduction": 3,
            "loss": 5, "optimizer": 114,
        },
        "ops": {
            "aten::addmm": "gemm", "aten::mm": "gemm", "aten::clamp_min": "activation",
            "aten::threshold_backward": "activation", "aten::_log_softmax": "softmax",
            "aten::nll_loss_forward": "loss", "aten::lerp_": "optimizer",
        },
    },
    "cnn_bn.py": {
        "classes": {
            "softmax": 3, "gemm": 4, "convolution": 10, "batchnorm": 8, "activation": 6,
            "pooling": 11, "elementwise": 12, "reduction": 1, "loss": 5, "optimizer": 50,
        },
        "ops": {
            "aten::mkldnn_convolution": "convolution",
            "aten::convolution_backward": "convolution",
            "aten::native_batch_norm": "batchnorm",
            "aten::native_batch_norm_backward": "batchnorm",
            "aten::max_pool2d_with_indices": "pooling",
            "aten::max_pool2d_with_indices_backward": "pooling",
            "aten::adaptive_avg_pool2d": "pooling",
            "aten::addmm": "gemm",
        },
    },
    "transformer.py": {
        "classes": {
            "softmax": 3, "gemm": 55, "attention": 18, "activation": 4, "elementwise": 203,
            "layout": 6, "reduction": 20, "embedding": 4, "loss": 5, "optimizer": 323,
        },
        "ops": {
            "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
            "aten::silu": "activation", "aten::rsqrt": "elementwise", "aten::pow": "elementwise",
            "aten::index_select": "embedding", "aten::mm": "gemm",
        },
    },
    "grad_accum.py": {
        "classes": {
            "softmax": 12, "gemm": 16, "elementwise": 113, "reduction": 12, "embedding": 16,
            "loss": 20, "optimizer": 57,
        },
        "ops": {
            "aten::index_select": "embedding", "aten::embedding_dense_backward": "embedding",
            "aten::addmm": "gemm", "aten::lerp_": "optimizer",
        },
    },
}  # fmt: skip

PROFILE_LOOP: dict[str, dict[str, int] | dict[str, str]] = {
    "classes": {
        "gemm": 7, "activation": 3, "elementwise": 13, "reduction": 4, "loss": 3,
        "optimizer": 64,
    },
    "ops": {
        "aten::addmm": "gemm", "aten::mm": "gemm", "aten::relu": "activation",
        "aten::mse_loss": "loss", "aten::mse_loss_backward": "loss", "aten::lerp_": "optimizer",
    },
}  # fmt: skip

"""What `tracekit report` classes on CPU runs of the held-in user scripts: the one place
these expectations live (tests/test_run_script.py and tests/test_report_cpu.py read them).

Per script: the work operators per profiled step of each class that has any (the report's
``classes.parquet``: ``kernel_count``, for classes with time), and the class of the key
operators (``operators.parquet``: every row of that operator name). :data:`PROFILE_LOOP`:
the same for the ``tracekit.profile()`` loop of tests/test_report_cpu.py (Linear-ReLU-Linear,
MSE loss, Adam). These are today's
classes: a convolution is ``gemm``, a batch-norm ``layernorm``, max-pooling ``reduction``;
when the op families gain ``convolution``, ``batchnorm``, ``pooling`` and ``layout``
classes, update them here.
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
            "softmax": 3, "layernorm": 8, "gemm": 14, "activation": 6, "elementwise": 17,
            "reduction": 7, "loss": 5, "optimizer": 50,
        },
        "ops": {
            "aten::mkldnn_convolution": "gemm",
            "aten::convolution_backward": "gemm",
            "aten::native_batch_norm": "layernorm",
            "aten::native_batch_norm_backward": "layernorm",
            "aten::max_pool2d_with_indices": "reduction",
            "aten::max_pool2d_with_indices_backward": "reduction",
            "aten::adaptive_avg_pool2d": "reduction",
            "aten::addmm": "gemm",
        },
    },
    "transformer.py": {
        "classes": {
            "softmax": 3, "gemm": 55, "attention": 18, "activation": 4, "elementwise": 209,
            "reduction": 20, "embedding": 4, "loss": 5, "optimizer": 323,
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

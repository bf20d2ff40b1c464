"""A small trace for report tests: tracegen's two steps plus softmax, layer norm, a kernel
with a hostile name and a memory timeline, every duration known.

GPU activities (durations in µs; classes as the classify rules give them):

    step 1  ampere_sgemm_32x32_sliced1x4_tn          5   gemm        (aten::addmm)
            ampere_sgemm_64x32_nn                    4   gemm        (aten::mm)
            reduce_kernel                            3   reduction   (aten::sum)
            Memcpy DtoH                              2   memcpy      (aten::copy_)
    step 2  vectorized_elementwise_kernel add    2 x 2   elementwise (aten::add_)
            cunn_SoftMaxForward                      6   softmax     (aten::_softmax)
            vectorized_layer_norm_kernel             8   layernorm   (aten::native_layer_norm)
            HOSTILE                                  1   other       (HOSTILE_OP)

Total 33 µs over 2 steps.
"""

from __future__ import annotations

from typing import Any

from . import tracegen as tg

HOSTILE = "<script>alert(1)</script>& [bold red]x[/bold red] | `$x^2$`"
HOSTILE_OP = "my::op<img src=x onerror=alert(2)>"


def report_trace() -> dict[str, Any]:
    doc = tg.small_trace()
    ev = doc["traceEvents"]
    ev += [
        tg.op(
            "aten::_softmax",
            150,
            10,
            20,
            **{"Input Dims": [[8, 128], [], []], "Input type": ["float", "Scalar", "Scalar"]},
        ),
        tg.launch(151, 21, 20),
        tg.kernel("void (anonymous namespace)::cunn_SoftMaxForward<4, float>(...)", 152, 6, 21, 20),
        tg.op("aten::native_layer_norm", 162, 10, 22),
        tg.launch(163, 23, 22),
        tg.kernel(
            "void at::native::vectorized_layer_norm_kernel<float, float>(...)", 164, 8, 23, 22
        ),
        tg.op(HOSTILE_OP, 175, 5, 24),
        tg.launch(176, 25, 24),
        tg.kernel(HOSTILE, 180, 1, 25, 24),
        # memory: up to 3072 + 8192 bytes at 151 us, freed at 172 us
        tg.memory(151, 8192, 3072 + 8192, addr=2000),
        tg.memory(172, -8192, 3072, addr=2000),
    ]
    return doc


# Expected GPU time per class [µs] of report_trace(), by hand from the table above.
EXPECTED_US = {
    "gemm": 9,
    "reduction": 3,
    "memcpy": 2,
    "elementwise": 4,
    "softmax": 6,
    "layernorm": 8,
    "other": 1,
}
TOTAL_US = 33

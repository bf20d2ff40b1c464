"""The op families' FLOP models against torch's own FLOP counter
(``torch.utils.flop_counter.FlopCounterMode``), on operator records made here by
``torch.profiler`` on CPU: convolutions forward and backward (stride, padding, dilation,
groups, transposed, 1-, 2- and 3-d, output masks), matrix products, attention. torch's
counter leaves biases out; the models add them (one add per output element, or per
output-gradient element for the bias gradient), so the difference is checked exactly.
Norms and pooling, which torch does not count, are checked by hand in test_classify_flops.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tracekit.classify.costs import op_cost

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _profile(cases: dict[str, Callable[[], object]], tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """Each case's operator records (name, Input Dims, Input type, Concrete Inputs)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for name, fn in cases.items():
            with record_function(name):
                fn()
    path = tmp / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] in cases}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") != "cpu_op":
            continue
        for case, (t0, t1) in spans.items():
            if t0 <= e["ts"] <= t1:
                out[case].append(e)
    return out


def _model(e: dict[str, Any]) -> float | None:
    a = e.get("args", {})
    c = op_cost(
        e["name"],
        json.dumps(a.get("Input Dims")),
        json.dumps(a.get("Input type")),
        json.dumps(a.get("Concrete Inputs")),
    )
    return None if c is None else c.flops


def _counted(fn: Callable[[], object]) -> dict[str, int]:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return {str(k): int(v) for k, v in fc.get_flop_counts()["Global"].items()}


def _conv(x_shape, w_shape, *, transposed: bool = False, bias: bool = False, grad_x=True, **kw):  # type: ignore[no-untyped-def]
    def run() -> None:
        torch.manual_seed(0)
        x = torch.randn(*x_shape, requires_grad=grad_x)
        w = torch.randn(*w_shape, requires_grad=True)
        b = torch.randn(w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0])
        b.requires_grad_(bias)
        nd = len(x_shape) - 2
        op = getattr(F, f"conv_transpose{nd}d" if transposed else f"conv{nd}d")
        y = op(x, w, b if bias else None, **kw)
        y.sum().backward()

    return run


CONV = {
    "conv2d_stride_pad_dil_groups": _conv(
        (2, 4, 13, 11), (6, 2, 3, 3), stride=2, padding=1, dilation=2, groups=2
    ),
    "conv2d_bias": _conv((2, 3, 9, 9), (5, 3, 3, 3), bias=True, padding=1),
    "conv2d_same_no_input_grad": _conv((1, 3, 8, 8), (4, 3, 5, 5), padding="same", grad_x=False),
    "conv1d": _conv((3, 4, 17), (8, 4, 5), stride=3, padding=2),
    "conv3d": _conv((1, 2, 6, 7, 5), (3, 2, 3, 2, 3), stride=(1, 2, 1), padding=(1, 0, 1)),
    "depthwise": _conv((2, 6, 10, 10), (6, 1, 3, 3), groups=6, padding=1),
    "conv_transpose2d": _conv(
        (2, 4, 5, 6), (4, 3, 3, 3), transposed=True, stride=2, padding=1, output_padding=1, groups=2
    ),
}


GROUPS = {"conv2d_stride_pad_dil_groups": 2, "depthwise": 6, "conv_transpose2d": 2}


def _bias_terms(e: dict[str, Any]) -> float:
    """The bias FLOPs the models add and torch's counter leaves out."""
    a = e["args"]
    dims, conc = a["Input Dims"], a.get("Concrete Inputs") or []
    if e["name"] == "aten::convolution_backward":
        mask = json.loads(conc[10].lower()) if len(conc) > 10 and conc[10] else [1, 1, 1]
        n = 1
        for d in dims[0]:
            n *= d
        return float(n) if mask[2] else 0.0
    return 0.0


@pytest.fixture(scope="module")
def conv_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return _profile(CONV, tmp_path_factory.mktemp("conv"))


@pytest.mark.parametrize("case", list(CONV))
def test_convolution_forward_and_backward_match_torchs_counter(
    case: str, conv_records: dict[str, list[dict[str, Any]]]
) -> None:
    want = _counted(CONV[case])
    fwd, bwd = want["aten.convolution"], want["aten.convolution_backward"]
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in conv_records[case]:
        by_name[e["name"]].append(e)
    checked = set()
    for name, recs in by_name.items():
        flops = [_model(e) for e in recs]
        # a string padding ('same') is not recorded: that level is NaN, an inner one decides
        if "conv" not in name or any(f is None or math.isnan(f) for f in flops):
            continue
        got = sum(f for f in flops if f is not None)
        if name == "aten::convolution_backward":
            # torch counts a grouped weight gradient `groups` times over (its formula
            # drops the groups): dgrad + groups·wgrad, where each is the forward's count
            groups = GROUPS.get(case, 1)
            assert got - sum(_bias_terms(e) for e in recs) == bwd - (groups - 1) * fwd, case
        elif "bias" in case:  # the bias: one add per output element (N·Cout·H·W)
            assert got - fwd == 2 * 5 * 9 * 9, (case, name)
        else:
            assert got == fwd, (case, name)
        checked.add(name)
    assert "aten::convolution_backward" in checked
    assert {"aten::convolution", "aten::_convolution"} <= checked, checked


def _gemms() -> dict[str, Callable[[], object]]:
    a, b = torch.randn(7, 12), torch.randn(12, 5)
    ba, bb = torch.randn(3, 7, 12), torch.randn(3, 12, 5)
    c, bc = torch.randn(7, 5), torch.randn(3, 7, 5)
    w, bias = torch.randn(9, 12), torch.randn(9)
    return {
        "mm": lambda: torch.mm(a, b),
        "addmm": lambda: torch.addmm(c, a, b),
        "bmm": lambda: torch.bmm(ba, bb),
        "baddbmm": lambda: torch.baddbmm(bc, ba, bb),
        "matmul_broadcast": lambda: torch.matmul(torch.randn(2, 3, 7, 12), bb),
        "linear": lambda: F.linear(ba, w, bias),
    }


@pytest.fixture(scope="module")
def gemm_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return _profile(_gemms(), tmp_path_factory.mktemp("gemm"))


@pytest.mark.parametrize(
    ("case", "op", "bias"),
    [
        ("mm", "aten::mm", 0),
        ("addmm", "aten::addmm", 7 * 5),
        ("bmm", "aten::bmm", 0),
        ("baddbmm", "aten::baddbmm", 3 * 7 * 5),
        ("matmul_broadcast", "aten::matmul", 0),
        ("linear", "aten::linear", 3 * 7 * 9),
    ],
)
def test_matrix_products_match_torchs_counter(
    case: str, op: str, bias: int, gemm_records: dict[str, list[dict[str, Any]]]
) -> None:
    want = sum(_counted(_gemms()[case]).values())
    recs = [e for e in gemm_records[case] if e["name"] == op]
    assert len(recs) == 1
    assert _model(recs[0]) == want + bias


def test_attention_matches_torchs_formulas(tmp_path: Path) -> None:
    """On CPU SDPA runs ``_scaled_dot_product_flash_attention_for_cpu``, which the counter
    does not register: its own formulas (sdpa_flop_count, sdpa_backward_flop_count) on the
    recorded shapes, non-causal (the model halves causal attention; torch does not)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    k = torch.randn(2, 3, 20, 8, requires_grad=True)
    v = torch.randn(2, 3, 20, 8, requires_grad=True)

    def run() -> None:
        F.scaled_dot_product_attention(q, k, v).sum().backward()

    recs = _profile({"sdpa": run}, tmp_path)["sdpa"]
    fwd = [e for e in recs if e["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    bwd = [
        e for e in recs if e["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
    ]
    assert len(fwd) == len(bwd) == 1
    shapes = (q.shape, k.shape, v.shape)
    assert _model(fwd[0]) == sdpa_flop_count(*shapes)
    assert _model(bwd[0]) == sdpa_backward_flop_count(q.shape, *shapes)

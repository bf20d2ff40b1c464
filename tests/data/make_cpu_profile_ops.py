"""Regenerate ``cpu_profile_ops.json``: real operator records from torch.profiler on CPU.

Runs a few operators under ``torch.profiler.profile(record_shapes=True, with_flops=True)``
on the CPU, exports the Chrome trace and keeps, for each distinct (name, Input Dims),
the operator's name, ``Input Dims``, ``Input type``, ``Concrete Inputs`` and the
profiler's own FLOP estimate (``FunctionEvent.flops``: torch 2.13 computes it for mm,
addmm, bmm, baddbmm, conv2d, mul and add but does not write it into the exported
trace, so it is taken from ``prof.events()`` by name and input shapes). The FLOP/byte
tests read these records, so they check the formulas against shapes exactly as the
profiler writes them and against the profiler's GEMM FLOPs.
Run: ``python tests/data/make_cpu_profile_ops.py`` (needs torch; the tests do not).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

KEEP = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::conv2d",
    "aten::convolution",
    "aten::_convolution",
    "aten::convolution_backward",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_softmax",
    "aten::_log_softmax",
    "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data",
    "aten::native_layer_norm",
    "aten::native_layer_norm_backward",
    "aten::gelu",
    "aten::gelu_backward",
    "aten::embedding",
    "aten::embedding_dense_backward",
    "aten::nll_loss_forward",
    "aten::nll_loss_backward",
    "aten::_fused_adamw_",
    "aten::_foreach_mul_",
    "aten::_foreach_add_",
    "aten::_foreach_lerp_",
    "aten::_foreach_addcmul_",
    "aten::_foreach_sqrt",
    "aten::_foreach_div_",
    "aten::_foreach_addcdiv_",
    "aten::add",
    "aten::add_",
    "aten::mul",
    "aten::copy_",
    "aten::_to_copy",
    "aten::native_dropout",
    "aten::masked_fill",
    "aten::sum",
    "aten::fill_",
    "aten::max_pool2d_with_indices",
}


def workload() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 96, generator=g), torch.randn(96, 128, generator=g)
    torch.mm(a, b)
    torch.addmm(torch.randn(128, generator=g), a, b)
    x3, y3 = torch.randn(4, 16, 32, generator=g), torch.randn(4, 32, 8, generator=g)
    torch.bmm(x3, y3)
    torch.baddbmm(torch.randn(4, 16, 8, generator=g), x3, y3)
    lin = torch.nn.Linear(96, 48)
    xl = torch.randn(2, 10, 96, generator=g, requires_grad=True)
    h = lin(xl)
    F.gelu(h).sum().backward()
    F.gelu(torch.randn(8, 8, generator=g), approximate="tanh")
    conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    img = torch.randn(2, 3, 16, 16, generator=g, requires_grad=True)
    out = conv(img)
    F.max_pool2d(out, 2).sum().backward()
    q = torch.randn(2, 4, 32, 16, generator=g, requires_grad=True)
    k = torch.randn(2, 4, 32, 16, generator=g, requires_grad=True)
    v = torch.randn(2, 4, 32, 16, generator=g, requires_grad=True)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    ln = torch.nn.LayerNorm(96)
    ln(xl).sum().backward()
    sm = torch.randn(6, 50, generator=g, requires_grad=True)
    F.softmax(sm, dim=-1).sum().backward()
    emb = torch.nn.Embedding(100, 24)
    idx = torch.randint(0, 100, (3, 7), generator=g)
    logits = emb(idx) @ torch.randn(24, 100, generator=g)
    F.cross_entropy(logits.view(-1, 100), idx.view(-1)).backward()
    F.dropout(torch.randn(5, 6, generator=g), p=0.1, training=True)
    torch.randn(4, 4, generator=g).masked_fill(torch.ones(4, 4, dtype=torch.bool).tril(), 0.0)
    torch.randn(8, 3, generator=g).to(torch.bfloat16)
    params = [
        torch.nn.Parameter(torch.randn(10, 20, generator=g)),
        torch.nn.Parameter(torch.randn(5, generator=g)),
    ]
    for p_ in params:
        p_.grad = torch.randn_like(p_)
    for fused in (True, False):
        opt = torch.optim.AdamW(params, lr=1e-3, fused=fused, foreach=None if fused else True)
        opt.step()


def main() -> None:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        workload()
    flops = {(ev.name, json.dumps(ev.input_shapes)): ev.flops for ev in prof.events() if ev.flops}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    seen: set[tuple[str, str]] = set()
    rows = []
    for e in trace["traceEvents"]:
        if e.get("cat") != "cpu_op" or e.get("name") not in KEEP:
            continue
        args = e.get("args", {})
        key = (e["name"], json.dumps(args.get("Input Dims")))
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            {
                "name": e["name"],
                "input_dims": json.dumps(args.get("Input Dims")),
                "input_types": json.dumps(args.get("Input type")),
                "concrete_inputs": json.dumps(args.get("Concrete Inputs")),
                "flops": args.get("flops") or flops.get(key),
            }
        )
    out = {"torch": torch.__version__, "device": "cpu", "ops": rows}
    Path(__file__).with_name("cpu_profile_ops.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(rows)} records")


if __name__ == "__main__":
    main()

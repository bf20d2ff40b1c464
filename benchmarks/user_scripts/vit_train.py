"""A user's ViT-style training script (no tracekit in it): patch embedding, 6 pre-norm
transformer blocks of width 384, bf16 autocast, fused AdamW, synthetic images. At batch 32
its step is host-bound on an H100/H200 (many small kernels), the case where anything a
profiler leaves attached shows most. ``--time`` prints this loop's own step time (CUDA
events at the end of each optimizer step, from step ``--warmup`` on), as the other scripts
here do::

    python benchmarks/user_scripts/vit_train.py --iters 60 --time
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch
from torch import nn

D, HEADS, LAYERS, PATCH = 384, 6, 6, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.att = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 196, D)
        h = self.n1(x)
        x = x + self.att(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, D, PATCH, stride=PATCH)  # (B, 3, 224, 224) -> (B, D, 14, 14)
        self.pos = nn.Parameter(torch.zeros(1, 196, D))
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2) + self.pos  # (B, 196, D)
        return self.head(self.norm(self.blocks(x)).mean(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--time", action="store_true", help="print this loop's own step time")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--warmup", type=int, default=10, help="steps before --time measures")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = ViT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x = torch.randn(args.batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (args.batch,), device=device)
    ends: list[torch.cuda.Event] = []
    for i in range(args.iters):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.time and i >= args.warmup:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            ends.append(ev)
    if ends:
        torch.cuda.synchronize()
    if args.time and len(ends) > 1:
        ms = [a.elapsed_time(b) for a, b in itertools.pairwise(ends)]
        print(
            f"plain step ms: median {statistics.median(ms):.3f} (n={len(ms)}, "
            f"min {min(ms):.3f}, max {max(ms):.3f}); "
            f"{args.batch / statistics.median(ms) * 1e3:,.0f} images/s"
        )


if __name__ == "__main__":
    main()

"""A small MLP classifier on random data (plain PyTorch).

``--time`` prints the loop's own step time as ``benchmarks/user_scripts/`` do (here
``perf_counter`` at the end of each optimizer step after ``--warmup`` iterations): the
CPU baseline of ``benchmarks/run_overhead.py``."""

import argparse
import itertools
import statistics
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--time", action="store_true", help="print this loop's own step time")
    parser.add_argument("--warmup", type=int, default=10, help="steps before --time measures")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 32)
    y = torch.randint(0, 10, (args.batch,))
    ends: list[float] = []
    for i in range(args.iters):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.time and i >= args.warmup:
            ends.append(time.perf_counter())
        if i % 10 == 0:
            print(f"iter {i} loss {loss.item():.3f}")
    if len(ends) > 1:
        ms = [(b - a) * 1e3 for a, b in itertools.pairwise(ends)]
        print(f"plain step ms: median {statistics.median(ms):.4f} (n={len(ms)})")
    print("done")


if __name__ == "__main__":
    main()

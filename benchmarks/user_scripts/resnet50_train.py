"""A torchvision ResNet-50 training loop, as a user would write it (no tracekit import).

Synthetic ImageNet-shaped data on the GPU, SGD with momentum, bf16 autocast and
channels_last by default. ``--time`` prints this loop's own step time (CUDA events at the
end of each optimizer step, the same boundary ``tracekit run`` times), the baseline for
tracekit's measured step.

    python benchmarks/user_scripts/resnet50_train.py --iters 60 --time
    tracekit run -- python benchmarks/user_scripts/resnet50_train.py --iters 60
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch
import torchvision


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--amp", choices=["bf16", "fp16", "off"], default="bf16")
    p.add_argument("--no-channels-last", action="store_true")
    p.add_argument("--time", action="store_true", help="print this loop's own step time")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--warmup", type=int, default=10, help="steps before --time measures")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = torchvision.models.resnet50(weights=None).to(device)
    fmt = torch.contiguous_format if args.no_channels_last else torch.channels_last
    model = model.to(memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": torch.float32}[args.amp]
    g = torch.Generator(device=device).manual_seed(0)
    images = [
        torch.randn(args.batch, 3, args.size, args.size, device=device, generator=g).to(
            memory_format=fmt
        )
        for _ in range(4)
    ]
    labels = [torch.randint(0, 1000, (args.batch,), device=device, generator=g) for _ in range(4)]
    loss_fn = torch.nn.CrossEntropyLoss()

    ends: list[torch.cuda.Event] = []
    for i in range(args.iters):
        x, y = images[i % 4], labels[i % 4]
        with torch.autocast(device.type, dtype=dtype, enabled=args.amp != "off"):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
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
            f"{args.batch / statistics.median(ms) * 1e3:.1f} images/s"
        )


if __name__ == "__main__":
    main()

"""A plain DDP training script, as `torchrun --nproc-per-node N ddp_mlp.py` would run it.

It knows nothing of tracekit: it reads the launcher's environment through
`init_process_group` (gloo on CPU, NCCL on GPUs), wraps an MLP in
DistributedDataParallel, and trains it on its own random batches (seed + rank).
`--plain` leaves DDP out (the model stays a plain module); `--fail-rank R --fail-at N`
makes rank R raise at iteration N (`--fail-how die`: end its process at once);
`--print-env` prints the launcher's variables."""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--plain", action="store_true", help="no DDP wrapper")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--fail-how", choices=("raise", "die"), default="raise")
    parser.add_argument("--print-env", action="store_true")
    args = parser.parse_args()
    if args.print_env:
        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                 "NVSHMEM_DISABLE_NVLS")  # fmt: skip
        print(" ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    if not args.plain:
        model = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for i in range(args.iters):
        if rank == args.fail_rank and i == args.fail_at:
            if args.fail_how == "die":  # the process ends at once, as a crash would
                print(f"rank {rank} dies at iteration {i}", file=sys.stderr, flush=True)
                os._exit(7)
            raise ValueError(f"rank {rank} gives up at iteration {i}")
        x = torch.randn(args.batch, 32, generator=gen).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"rank {rank} done: loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""What each profiler leaves behind in a process, and whether tearing CUPTI down removes it.

Each variant runs in a fresh process (CUPTI's state is per process): a host-bound ViT-style
step (bf16 autocast, fused AdamW) timed in a window of unprofiled steps *before* any
profiler ran, then one profiler pass over a few steps, then windows of unprofiled steps
*after* it; the ratio after/before is the residual the pass left. Variants:

* ``none``: no pass (3 plain steps): the spread the host's drift alone gives the ratio;
* ``kineto``: ``torch.profiler`` CPU+CUDA over 3 steps, ``TEARDOWN_CUPTI`` unset (Kineto
  leaves CUPTI attached);
* ``kineto-teardown``: the same with ``TEARDOWN_CUPTI=1`` (Kineto calls cuptiFinalize);
* ``cupti``: cupti-python kernels-only activity over 3 steps, kinds disabled after;
* ``cupti-finalize``: the same, then ``cupti.finalize()``;
* ``sequence``: as tracekit runs them: cupti kernels-only (kinds disabled after), one
  step, Kineto with teardown, one CUDA call (``torch.cuda.synchronize``: Kineto's deferred
  teardown completes at a CUDA call's exit), Kineto again; each pass's recorded GPU events
  are counted, so a pass that records nothing after a teardown shows.

Processes alternate variant order every round. Prints one JSON line per process and a
summary (median ratio per variant, min-max over rounds)::

    python benchmarks/cupti_teardown.py --rounds 2            # on a GPU, cupti-python installed
    python benchmarks/cupti_teardown.py --child kineto-teardown   # one process
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

VARIANTS = ("none", "kineto", "kineto-teardown", "cupti", "cupti-finalize", "sequence")


def _child(variant: str, batch: int, window_steps: int) -> dict[str, Any]:
    import torch
    import torch.nn as nn

    dev = "cuda"
    torch.manual_seed(0)
    d, heads, layers = 384, 6, 6

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.n1(x)
            x = x + self.att(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.n2(x))

    model = nn.Sequential(*[Block() for _ in range(layers)], nn.Linear(d, 1000)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch, 196, d, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step() -> None:
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).mean(1), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def window() -> float:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(window_steps + 1)]
        ev[0].record()
        for i in range(window_steps):
            step()
            ev[i + 1].record()
        torch.cuda.synchronize()
        return statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(window_steps))

    def kineto() -> int:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as p:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        return sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    recs: list[int] = []

    def cupti_pass(finalize: bool) -> int:
        from cupti import cupti

        kinds = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY,
                 cupti.ActivityKind.MEMSET]  # fmt: skip
        n0 = len(recs)
        cupti.activity_register_callbacks(
            lambda: (8 << 20, 0), lambda acts: recs.extend(1 for _ in acts)
        )
        for k in kinds:
            cupti.activity_enable(k)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        for k in kinds:
            cupti.activity_disable(k)
        cupti.activity_flush_all(1)
        if finalize:
            cupti.finalize()
        return len(recs) - n0

    if variant.startswith("kineto-teardown") or variant == "sequence":
        os.environ["TEARDOWN_CUPTI"] = "1"
    for _ in range(15):
        step()
    before = [window(), window()]
    recorded: dict[str, int] = {}
    if variant == "none":  # the null: what the host's drift alone does to after/before
        for _ in range(3):
            step()
    elif variant in ("kineto", "kineto-teardown"):
        recorded["kineto"] = kineto()
    elif variant in ("cupti", "cupti-finalize"):
        recorded["cupti"] = cupti_pass(variant == "cupti-finalize")
    else:  # tracekit's order: each Kineto stop settled by one CUDA call before the next
        recorded["cupti"] = cupti_pass(False)
        step()
        recorded["kineto_1"] = kineto()
        torch.cuda.synchronize()
        recorded["kineto_2"] = kineto()
        torch.cuda.synchronize()
    for _ in range(3):  # a teardown completes at the next CUDA call's exit callback
        step()
    after = [window(), window(), window()]
    b, a = statistics.median(before), statistics.median(after)
    return {"variant": variant, "before_ms": round(b, 3), "after_ms": round(a, 3),
            "ratio": round(a / b, 4), "recorded": recorded,
            "teardown_env": os.environ.get("TEARDOWN_CUPTI"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window", type=int, default=15, help="steps per timed window")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.batch, args.window)), flush=True)
        return
    variants = args.variants.split(",")
    got: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            env = {k: val for k, val in os.environ.items() if k != "TEARDOWN_CUPTI"}
            cmd = [sys.executable, __file__, "--child", v, "--batch", str(args.batch),
                   "--window", str(args.window)]  # fmt: skip
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            line = p.stdout.strip().splitlines()[-1:] or [f'{{"error": {p.returncode}}}']
            if p.returncode != 0:
                err = (p.stderr.strip().splitlines() or ["?"])[-1]
                line = [json.dumps({"variant": v, "error": f"rc {p.returncode}: {err}"})]
            print(line[0], flush=True)
            rec = json.loads(line[0])
            if "ratio" in rec:
                got[v].append(rec)
    print("variant           after/before  median [min-max]  rounds  recorded")
    for v, recs in got.items():
        if not recs:
            print(f"{v:<17} failed")
            continue
        ratios = [x["ratio"] for x in recs]
        print(f"{v:<17} x{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
              f"  {len(recs):>6}  {recs[-1]['recorded']}")  # fmt: skip


if __name__ == "__main__":
    main()

"""A Hugging Face causal-LM training loop built from a config (no weights downloaded, no
tracekit import): GPT-2-small by default, or a LLaMA-style model (RMSNorm, SwiGLU, RoPE)
of similar size with ``--model llama``. Random token ids on the GPU, AdamW, bf16 autocast,
SDPA attention. ``--time`` prints this loop's own step time (CUDA events at the end of each
optimizer step, the boundary ``tracekit run`` times).

    python benchmarks/user_scripts/hf_causal_lm_train.py --iters 60 --time
    tracekit run -- python benchmarks/user_scripts/hf_causal_lm_train.py --iters 60
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig


def build(name: str) -> torch.nn.Module:
    if name == "gpt2":  # GPT-2 small: 124 M parameters (tied embeddings)
        config = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    else:  # LLaMA-style, ~110 M parameters
        config = LlamaConfig(
            vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
            num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=1024,
        )  # fmt: skip
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--time", action="store_true", help="print this loop's own step time")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    p.add_argument("--warmup", type=int, default=10, help="steps before --time measures")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    model = build(args.model).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    vocab = model.config.vocab_size
    g = torch.Generator(device=device).manual_seed(0)
    batches = [
        torch.randint(0, vocab, (args.batch, args.seq), device=device, generator=g)
        for _ in range(8)
    ]
    ends: list[torch.cuda.Event] = []
    for i in range(args.iters):
        ids = batches[i % len(batches)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.time and i >= args.warmup:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            ends.append(ev)
    if ends:
        torch.cuda.synchronize()
    if args.time and len(ends) > 1:
        ms = [a.elapsed_time(b) for a, b in itertools.pairwise(ends)]
        tokens = args.batch * args.seq
        print(
            f"plain step ms: median {statistics.median(ms):.3f} (n={len(ms)}, "
            f"min {min(ms):.3f}, max {max(ms):.3f}); "
            f"{tokens / statistics.median(ms) * 1e3:,.0f} tokens/s"
        )


if __name__ == "__main__":
    main()

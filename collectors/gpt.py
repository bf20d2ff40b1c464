"""A decoder-only GPT (nanoGPT-style) in one readable module.

The model is the workload that ``tracekit collect`` profiles, so it is written
to make the interesting kernels visible rather than to be fast:

* ``attention="naive"`` computes ``softmax(mask(Q Kᵀ / √d)) V`` explicitly: the
  trace shows two batched GEMMs, a masked fill, a softmax kernel and a
  ``(B, H, T, T)`` attention matrix held for backward (O(T²) memory).
* ``attention="sdpa"`` calls ``F.scaled_dot_product_attention(is_causal=True)``,
  which dispatches to flash / memory-efficient kernels where available.

Two execution options that do not change the maths:

* ``GPT(cfg, checkpoint=True)``: activation checkpointing per block in training
  (``torch.utils.checkpoint``, non-reentrant): a block keeps only its input for
  backward and runs its forward again there.
* ``forward(idx, cache=KVCache, pos=p)``: inference with a preallocated KV cache
  (``tracekit collect --workload generate``): the new tokens' keys and values are
  written at positions ``p ..`` and attention reads the ``p + T`` cached ones.

Shapes in comments use B = batch, T = sequence length, C = n_embd,
H = n_head, D = C / H (head size), V = vocab size, L = n_layer, S = the KV cache's
length (prompt + new tokens), P = cached positions before this call (``pos``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

# the hyper-parameters live in a torch-free module (collect validates flags before torch)
from tracekit.collectors.gpt_config import ATTENTIONS as ATTENTIONS
from tracekit.collectors.gpt_config import PRESETS as PRESETS
from tracekit.collectors.gpt_config import Attention as Attention
from tracekit.collectors.gpt_config import GPTConfig as GPTConfig
from tracekit.collectors.gpt_config import preset as preset
from tracekit.errors import UsageError


def count_params(cfg: GPTConfig) -> int:
    """Analytic parameter count (equals ``sum(p.numel() for p in GPT(cfg).parameters())``)."""
    C, V, hid, b = cfg.n_embd, cfg.vocab_size, cfg.mlp_hidden, int(cfg.bias)
    ln = C + b * C  # LayerNorm weight (+ bias)
    attn = (C * 3 * C + b * 3 * C) + (C * C + b * C)  # c_attn + c_proj
    mlp = (C * hid + b * hid) + (hid * C + b * C)  # c_fc + c_proj
    block = 2 * ln + attn + mlp
    emb = V * C + cfg.block_size * C  # wte + wpe
    head = 0 if cfg.tie_embeddings else V * C  # lm_head has no bias
    return emb + cfg.n_layer * block + ln + head


def train_flops_per_token(cfg: GPTConfig, seq: int) -> int:
    """Training FLOPs per token: 6·N (forward + backward GEMMs, N = non-embedding
    parameters incl. the output projection) + 12·L·C·T (attention scores and
    PV), following Kaplan et al. 2020 and Chowdhery et al. 2022, appendix B."""
    return 6 * matmul_params(cfg) + 12 * cfg.n_layer * cfg.n_embd * seq


def matmul_params(cfg: GPTConfig) -> int:
    """Parameters that do matmul work per token: embedding lookups do none, so without
    wpe, and without wte unless it doubles as lm_head."""
    n = count_params(cfg) - cfg.block_size * cfg.n_embd
    if not cfg.tie_embeddings:
        n -= cfg.vocab_size * cfg.n_embd
    return n


def decode_flops_per_token(cfg: GPTConfig, context: int) -> int:
    """Forward FLOPs of one decode step per sequence at ``context`` cached tokens:
    2·N (the GEMMs, N = matmul parameters) + 4·L·C·context (QKᵀ and PV against the
    cache), the forward third of :func:`train_flops_per_token`."""
    return 2 * matmul_params(cfg) + 4 * cfg.n_layer * cfg.n_embd * context


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.n_embd, self.attention = cfg.n_head, cfg.n_embd, cfg.attention
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        if cfg.attention == "naive":
            # (1, 1, block, block) lower-triangular mask, True = may attend.
            mask = torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool).tril()
            self.register_buffer(
                "mask", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False
            )

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
        pos: int = 0,
    ) -> torch.Tensor:
        """``x`` (B, T, C). With ``kv`` (this layer's cache, 2 × (B, H, S, D)), the T new
        keys and values are written at positions ``pos .. pos + T`` and the queries attend
        to all ``pos + T`` cached ones (causally)."""
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T, C)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        if kv is not None:
            k_cache, v_cache = kv  # (B, H, S, D) each, preallocated
            k_cache[:, :, pos : pos + T] = k  # write the new keys ...
            v_cache[:, :, pos : pos + T] = v  # ... and values
            k = k_cache[:, :, : pos + T]  # (B, H, P + T, D): a view, no copy
            v = v_cache[:, :, : pos + T]  # (B, H, P + T, D)
        if self.attention == "naive":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, P + T)
            if T > 1:  # one new token may attend to every cached one: no mask needed
                mask: torch.Tensor = self.mask  # type: ignore[assignment]
                # query i sits at position pos + i: keys 0 .. pos + i
                att = att.masked_fill(~mask[:, :, pos : pos + T, : pos + T], float("-inf"))
            att = F.softmax(att, dim=-1)  # (B, H, T, P + T), rows sum to 1
            att = self.attn_dropout(att)
            y = att @ v  # (B, H, T, P + T) @ (B, H, P + T, D) -> (B, H, T, D)
        else:
            causal: dict[str, Any] = {"is_causal": True}
            if T == 1:  # decode: the new token attends to every cached one
                causal = {"is_causal": False}
            elif pos > 0:  # is_causal aligns the mask top-left; T queries after P keys
                causal = {"attn_mask": torch.ones(T, pos + T, dtype=torch.bool,
                                                  device=x.device).tril(pos)}  # fmt: skip
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, **causal
            )  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side: (B, T, C)
        out: torch.Tensor = self.resid_dropout(self.c_proj(y))  # (B, T, C)
        return out


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.mlp_hidden, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(cfg.mlp_hidden, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gelu(self.c_fc(x))  # (B, T, C) -> (B, T, mlp_hidden)
        out: torch.Tensor = self.dropout(self.c_proj(h))  # (B, T, C)
        return out


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
        pos: int = 0,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), kv, pos)  # (B, T, C)
        out: torch.Tensor = x + self.mlp(self.ln_2(x))  # (B, T, C)
        return out


@dataclass
class KVCache:
    """Preallocated keys and values of every layer for inference: ``k`` and ``v`` are
    (L, B, H, S, D) each, S = the longest context (prompt + new tokens). Its size is
    2·L·B·S·C elements (C = H·D), the memory-wall formula."""

    k: torch.Tensor  # (L, B, H, S, D)
    v: torch.Tensor  # (L, B, H, S, D)

    @classmethod
    def allocate(
        cls,
        cfg: GPTConfig,
        batch: int,
        length: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> KVCache:
        if length > cfg.block_size:
            raise UsageError(f"KV cache length {length} exceeds block_size {cfg.block_size}")
        shape = (cfg.n_layer, batch, cfg.n_head, length, cfg.head_size)  # (L, B, H, S, D)
        k = torch.zeros(shape, dtype=dtype, device=device)
        v = torch.zeros(shape, dtype=dtype, device=device)
        return cls(k, v)

    @property
    def length(self) -> int:
        return int(self.k.shape[3])

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[i], self.v[i]  # (B, H, S, D) views


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, *, checkpoint: bool = False) -> None:
        super().__init__()
        self.config = cfg
        # Activation checkpointing per block (training only; see forward).
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # token embedding (V, C)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)  # position embedding (block, C)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one (V, C) matrix, counted once
        self.apply(self._init_weights)
        # GPT-2 scales the residual projections by 1/sqrt(2·L).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        pos: int = 0,
    ) -> torch.Tensor:
        """Logits (B, T, V) for token ids ``idx`` (B, T); with ``targets`` (B, T),
        the mean next-token cross-entropy loss (a scalar) instead. With ``cache``, the
        tokens sit at positions ``pos .. pos + T`` after the cached ones, their keys and
        values go into the cache, and only the last position's logits (B, 1, V) are
        computed (all that sampling the next token needs)."""
        B, T = idx.shape
        if pos + T > self.config.block_size:
            raise UsageError(
                f"sequence length {pos + T} exceeds block_size {self.config.block_size}"
            )
        pos_ids = torch.arange(pos, pos + T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos_ids))  # (B, T, C) + (T, C) -> (B, T, C)
        checkpointed = self.checkpoint and cache is None and torch.is_grad_enabled()
        for i, block in enumerate(self.blocks):
            if cache is not None:
                x = block(x, cache.layer(i), pos)  # (B, T, C)
            elif checkpointed:
                # Keep only the block's input; backward runs the block's forward again.
                # RNG state is restored for the recompute only where dropout draws any.
                x = torch.utils.checkpoint.checkpoint(
                    block, x, use_reentrant=False, preserve_rng_state=self.config.dropout > 0
                )  # (B, T, C)
            else:
                x = block(x)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        if cache is not None:
            last: torch.Tensor = self.lm_head(x[:, -1:, :])  # (B, 1, V)
            return last
        logits: torch.Tensor = self.lm_head(x)  # (B, T, V)
        if targets is None:
            return logits
        # Cross-entropy over B·T positions: (B·T, V) logits vs (B·T,) targets.
        return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))

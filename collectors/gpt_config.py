"""``GPTConfig`` and the presets: the model's hyper-parameters, validated without importing
torch (the model itself is :mod:`tracekit.collectors.gpt`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from tracekit.errors import UsageError

Attention = Literal["naive", "sdpa"]
ATTENTIONS: tuple[str, ...] = ("naive", "sdpa")


@dataclass(frozen=True)
class GPTConfig:
    """Model hyper-parameters; invalid combinations raise :class:`UsageError`."""

    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    tie_embeddings: bool = True
    bias: bool = True
    attention: Attention = "naive"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "n_embd", "block_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"GPTConfig.{name} must be a positive integer, got {v!r}")
        if self.n_embd % self.n_head:
            raise UsageError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if not (self.mlp_ratio > 0 and self.mlp_hidden >= 1):
            raise UsageError(f"mlp_ratio must be > 0, got {self.mlp_ratio!r}")
        if not (0.0 <= self.dropout < 1.0):
            raise UsageError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.attention not in ATTENTIONS:
            raise UsageError(
                f"attention must be one of {', '.join(ATTENTIONS)}, got {self.attention!r}"
            )

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        return round(self.mlp_ratio * self.n_embd)

    def replace(self, **changes: Any) -> GPTConfig:
        """A copy with ``changes`` applied (and validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, GPTConfig] = {
    # For CPU tests: builds and runs a step in milliseconds.
    "tiny": GPTConfig(vocab_size=512, n_layer=2, n_head=4, n_embd=64, block_size=128),
    # GPT-2 sizes (Radford et al. 2019, table 2); vocab padded 50257 -> 50304
    # (a multiple of 64) as nanoGPT does, for GEMM-friendly shapes.
    "gpt2-small": GPTConfig(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": GPTConfig(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": GPTConfig(n_layer=36, n_head=20, n_embd=1280),
}


def preset(name: str) -> GPTConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None

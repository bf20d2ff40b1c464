"""The shape of a ``collectors/gpt.py`` model as the analytic models read it: the GPTConfig
fields of a run's manifest (``config.model``, a plain mapping, so no torch), its parameter
counts, and the bytes of an element of each dtype ``tracekit collect`` runs in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.errors import UsageError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
FP32 = 4


@dataclass(frozen=True)
class ModelShape:
    """The GPTConfig fields the model needs (``collectors/gpt.py``)."""

    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    tie_embeddings: bool = True
    bias: bool = True

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> ModelShape:
        try:
            return cls(
                vocab_size=int(m["vocab_size"]),
                n_layer=int(m["n_layer"]),
                n_head=int(m["n_head"]),
                n_embd=int(m["n_embd"]),
                block_size=int(m["block_size"]),
                mlp_ratio=float(m.get("mlp_ratio", 4.0)),
                dropout=float(m.get("dropout", 0.0)),
                tie_embeddings=bool(m.get("tie_embeddings", True)),
                bias=bool(m.get("bias", True)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"model config lacks or mangles a GPTConfig field: {e}") from None

    @property
    def mlp_hidden(self) -> int:
        return round(self.mlp_ratio * self.n_embd)

    def n_params(self) -> int:
        """Same count as ``collectors.gpt.count_params``."""
        C, V, hid, b = self.n_embd, self.vocab_size, self.mlp_hidden, int(self.bias)
        ln = C + b * C
        attn = (C * 3 * C + b * 3 * C) + (C * C + b * C)
        mlp = (C * hid + b * hid) + (hid * C + b * C)
        emb = V * C + self.block_size * C
        head = 0 if self.tie_embeddings else V * C
        return emb + self.n_layer * (2 * ln + attn + mlp) + ln + head

    def largest_param(self) -> int:
        C, hid = self.n_embd, self.mlp_hidden
        return max(self.vocab_size * C, self.block_size * C, 3 * C * C, hid * C)

    def linear_weights(self) -> int:
        """Elements of all Linear weights (what autocast copies), incl. lm_head."""
        C, hid = self.n_embd, self.mlp_hidden
        return self.n_layer * (3 * C * C + C * C + 2 * C * hid) + self.vocab_size * C

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV cache bytes of one token of one sequence: keys and values of every layer,
        2·L·C·bytes (multi-head attention: kv_head_ratio 1)."""
        return 2 * self.n_layer * self.n_embd * bytes_per_elem(dtype)


def shape_of(model: Mapping[str, Any] | ModelShape) -> ModelShape:
    """``model`` as a :class:`ModelShape` (a manifest's ``config.model`` mapping, or one)."""
    return model if isinstance(model, ModelShape) else ModelShape.from_mapping(model)


def bytes_per_elem(dtype: str) -> int:
    """Bytes of one element of ``dtype`` (one of :data:`DTYPE_BYTES`)."""
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]

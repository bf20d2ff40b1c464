"""Analytic model of GPT decoding (``collect --workload generate``): bytes and FLOPs of a
decode step, and the batch at which decoding stops being memory-bound.

A decode step computes one new token for each of B sequences whose KV cache holds ``c``
tokens (decode step ``d`` of a run with prompt P attends to c = P + d + 1, its own token
included). With L layers, width C, N = matmul parameters (every parameter but the position
embedding, and but an untied token embedding: embedding lookups do no matmul) and ``b``
bytes per element of the weights and the cache (the run's dtype), the step

* reads every weight it multiplies once, whatever B: W = b·N_read bytes, N_read = N (a tied
  token embedding is read in full as the LM head; the embedding rows are not counted);
* reads the KV cache: 2·L·B·c·C·b bytes, and writes the new token's keys and values:
  2·L·B·C·b;
* does 2·N FLOPs per token in its GEMMs and 4·L·C·c in attention (QKᵀ and PV), the
  forward third of the training count (6·N + 12·L·C·T, ``collectors/gpt.py``).

Not counted: activations (per step O(B·(C + V)) bytes; the largest, the logits, are
B·V·b, e.g. 25.8 MB for gpt2-small bf16 at B = 256 against W = 247 MB), LayerNorm
statistics, the sampling.

The weight GEMMs do 2·N·B FLOPs on W bytes: their intensity 2·N·B / W = 2B/b grows with
the batch and reaches the ridge point R = peak FLOP/s ÷ bandwidth at
``gemm_ridge_batch`` = R·W / (2·N) (= R·b/2: 1 byte of weight per FLOP-pair). Attention
does 4·L·C·c·B FLOPs on 2·L·B·c·C·b bytes: 2/b FLOP/byte whatever B, so it never gets
there. The whole step's intensity therefore saturates as B grows, at
(2N + 4·L·C·c) / (2·L·C·(c + 1)·b); ``step_ridge_batch`` is the batch at which it reaches
R, ``None`` when it cannot (long contexts). The step time on the roofline
(:meth:`DecodeStep.time_s`) treats the two parts apart:
max(W / BW, 2·N·B / peak) + max(KV bytes / BW, attention FLOPs / peak).

That ridge is the **roofline's**: it assumes the weights stream at the copy ceiling. The
decode GEMMs do not: each of a small model's per-layer GEMMs moves a few MB and takes a
few µs almost whatever its size (only the LM head's large matrix comes near the ceiling),
so their time per step, flat below the crossover, is the weights streamed at an
**achieved bandwidth** W / t_w, a quarter of the ceiling for gpt2-small on an H200.
Their time per step is t(B) = t_w + B·2N / P, so it doubles its flat part at
B* = P·t_w / (2N) (:func:`achieved_gemm_ridge_batch`): the ridge point at the achieved
bandwidth, R'·W/(2N) with R' = P·t_w / W. t_w comes from the decode GEMMs' measured time
at a batch below the ridge (the trace), less its FLOPs at P (:func:`weight_stream_time`);
P is the matmul roof (measured where the run has it): past the crossover the H200
sweeps' GEMM time grows at about that rate, so the compute side holds and the bandwidth
is what the roofline misses (figures in docs/generate.md).

The model reads a run's manifest (``config.model``, ``config.dtype`` and the ``generate``
block that ``collect --workload generate`` writes); no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tracekit.classify.models.shape import ModelShape, bytes_per_elem, shape_of
from tracekit.errors import UsageError
from tracekit.manifest import manifest_or_empty


def matmul_params(model: Mapping[str, Any] | ModelShape) -> int:
    """N: parameters that do matmul work per token (``collectors.gpt.matmul_params``)."""
    s = shape_of(model)
    n = s.n_params() - s.block_size * s.n_embd
    if not s.tie_embeddings:
        n -= s.vocab_size * s.n_embd
    return n


def weight_bytes(model: Mapping[str, Any] | ModelShape, dtype: str) -> int:
    """W: bytes of the weights one decode step reads (every multiplied weight, once)."""
    return matmul_params(model) * bytes_per_elem(dtype)


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of ``batch`` sequences attending to ``context`` cached tokens."""

    batch: int
    context: int
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int
    gemm_flops: int
    attention_flops: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def flops(self) -> int:
        return self.gemm_flops + self.attention_flops

    @property
    def intensity(self) -> float:
        """FLOP per byte of the whole step."""
        return self.flops / self.bytes

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.batch

    @property
    def flops_per_token(self) -> float:
        return self.flops / self.batch

    def time_s(self, bandwidth_Bps: float, peak_flops: float) -> float:
        """The step on the roofline, its GEMM and attention parts each at its own bound."""
        gemm = max(self.weight_bytes / bandwidth_Bps, self.gemm_flops / peak_flops)
        kv = self.kv_read_bytes + self.kv_write_bytes
        attn = max(kv / bandwidth_Bps, self.attention_flops / peak_flops)
        return gemm + attn

    def bound(self, bandwidth_Bps: float, peak_flops: float) -> str:
        """'memory' or 'compute': the whole step's intensity against the ridge point."""
        return "compute" if self.intensity >= ridge_point(peak_flops, bandwidth_Bps) else "memory"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(bytes=self.bytes, flops=self.flops, intensity=self.intensity)
        return d


def decode_step(
    model: Mapping[str, Any] | ModelShape, *, batch: int, context: int, dtype: str
) -> DecodeStep:
    """Bytes and FLOPs of one decode step (see the module docstring)."""
    if batch < 1 or context < 1:
        raise UsageError(f"batch and context must be >= 1, got {batch}, {context}")
    s = shape_of(model)
    b = bytes_per_elem(dtype)
    L, C, B, c = s.n_layer, s.n_embd, batch, context
    return DecodeStep(
        batch=B,
        context=c,
        weight_bytes=weight_bytes(s, dtype),
        kv_read_bytes=2 * L * B * c * C * b,
        kv_write_bytes=2 * L * B * C * b,
        gemm_flops=2 * matmul_params(s) * B,
        attention_flops=4 * L * C * c * B,
    )


@dataclass(frozen=True)
class Prefill:
    """The prefill of ``batch`` prompts of ``prompt`` tokens (only the last position's
    logits are computed; attention FLOPs count the full P×P square, as naive attention
    computes it)."""

    batch: int
    prompt: int
    flops: int
    bytes: int  # weights once + the KV cache written

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def prefill(
    model: Mapping[str, Any] | ModelShape, *, batch: int, prompt: int, dtype: str
) -> Prefill:
    s = shape_of(model)
    b = bytes_per_elem(dtype)
    L, C, V, B, P = s.n_layer, s.n_embd, s.vocab_size, batch, prompt
    head = V * C  # the LM head runs on the last position only
    flops = B * (2 * (matmul_params(s) - head) * P + 2 * head + 4 * L * C * P * P)
    return Prefill(B, P, flops, weight_bytes(s, dtype) + 2 * L * B * P * C * b)


def ridge_point(peak_flops: float, bandwidth_Bps: float) -> float:
    """FLOP per byte at which the compute roof meets the bandwidth roof."""
    return peak_flops / bandwidth_Bps


def gemm_ridge_batch(
    model: Mapping[str, Any] | ModelShape, *, dtype: str, peak_flops: float, bandwidth_Bps: float
) -> float:
    """The batch at which the decode step's weight GEMMs reach the ridge point:
    R·W / (2·N); above it they are compute-bound."""
    R = ridge_point(peak_flops, bandwidth_Bps)
    return R * weight_bytes(model, dtype) / (2 * matmul_params(model))


def weight_stream_time(
    gemm_s: float, *, batch: int, gemm_flops_per_seq: float, peak_flops: float
) -> float:
    """t_w, the flat part of the decode GEMMs' time per step: their measured time
    ``gemm_s`` at ``batch`` less that batch's FLOPs at ``peak_flops``, t − B·2N/P."""
    return gemm_s - batch * gemm_flops_per_seq / peak_flops


def achieved_gemm_ridge_batch(
    gemm_s: float, *, batch: int, gemm_flops_per_seq: float, peak_flops: float
) -> float | None:
    """The batch at which the decode GEMMs' time doubles its flat part, predicted from
    their time ``gemm_s`` measured at a ``batch`` below the ridge: B* = P·t_w / (2N), the
    ridge point of the bandwidth the weights actually stream at (W / t_w) with the
    matmul roof P (the module docstring). None when t_w <= 0 (no flat part measured)."""
    t_w = weight_stream_time(
        gemm_s, batch=batch, gemm_flops_per_seq=gemm_flops_per_seq, peak_flops=peak_flops
    )
    return peak_flops * t_w / gemm_flops_per_seq if t_w > 0 else None


def step_ridge_batch(
    model: Mapping[str, Any] | ModelShape,
    *,
    context: int,
    dtype: str,
    peak_flops: float,
    bandwidth_Bps: float,
) -> float | None:
    """The batch at which a whole decode step at ``context`` reaches the ridge point:
    B·F / (W + B·K) = R, F and K the FLOPs and KV bytes per token; None when the KV
    cache's bytes grow too fast for that (F <= R·K)."""
    R = ridge_point(peak_flops, bandwidth_Bps)
    one = decode_step(model, batch=1, context=context, dtype=dtype)
    F, K = one.flops, one.kv_read_bytes + one.kv_write_bytes
    if F <= R * K:
        return None
    return R * one.weight_bytes / (F - R * K)


@dataclass(frozen=True)
class DecodeModel:
    """A generate run's shape: ``new_tokens`` decode steps after a ``prompt``-token
    prefill, ``batch`` sequences, weights and cache in ``dtype``."""

    shape: ModelShape
    dtype: str
    batch: int
    prompt: int
    new_tokens: int

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> DecodeModel:
        """From a ``collect --workload generate`` manifest."""
        man = manifest_or_empty(manifest)
        cfg, g = man.config, man.generate
        if not g or cfg.workload != "generate":
            raise UsageError("not a generate run: its manifest has no 'generate' block")
        if cfg.model is None or cfg.dtype is None:
            raise UsageError("a generate run's manifest without its model config or dtype")
        return cls(
            ModelShape.from_mapping(cfg.model),
            cfg.dtype,
            int(g["batch"]),
            int(g["prompt"]),
            int(g["new_tokens"]),
        )

    @classmethod
    def model_of(cls, manifest: Any) -> DecodeModel | None:
        """:meth:`from_manifest`, or None for anything that is not a generate run's
        manifest (a training run, a bare trace, a mangled config)."""
        if not isinstance(manifest, Mapping):
            return None
        try:
            return cls.from_manifest(manifest)
        except (UsageError, KeyError, TypeError, ValueError):
            return None

    def step(self, d: int) -> DecodeStep:
        """Decode step ``d`` (0-based, ProfilerStep#d): context prompt + d + 1."""
        if not 0 <= d < self.new_tokens:
            raise UsageError(f"decode step {d} is not in 0 .. {self.new_tokens - 1}")
        return decode_step(
            self.shape, batch=self.batch, context=self.prompt + d + 1, dtype=self.dtype
        )

    def steps(self) -> list[DecodeStep]:
        return [self.step(d) for d in range(self.new_tokens)]

    def mean_bytes_per_step(self) -> float:
        return sum(s.bytes for s in self.steps()) / self.new_tokens

    def mean_flops_per_token(self) -> float:
        return sum(s.flops_per_token for s in self.steps()) / self.new_tokens

    def prefill(self) -> Prefill:
        return prefill(self.shape, batch=self.batch, prompt=self.prompt, dtype=self.dtype)

    def kv_cache_bytes(self) -> int:
        """The preallocated cache: 2·L·B·(prompt + new_tokens)·C·b."""
        ctx = self.prompt + self.new_tokens
        return self.batch * ctx * self.shape.kv_bytes_per_token(self.dtype)

    def gemm_flops_per_seq(self) -> int:
        """2·N: the weight GEMMs' FLOPs per sequence of a decode step."""
        return 2 * matmul_params(self.shape)

    def achieved(
        self, gemm_s: float, bandwidth_Bps: float, peak_flops: float
    ) -> dict[str, float | None]:
        """The crossover predicted from the decode GEMMs' measured time per step
        ``gemm_s`` at this run's batch: the bandwidth the weights stream at (W / t_w, and
        its % of ``bandwidth_Bps``) and :func:`achieved_gemm_ridge_batch`."""
        f = self.gemm_flops_per_seq()
        t_w = weight_stream_time(
            gemm_s, batch=self.batch, gemm_flops_per_seq=f, peak_flops=peak_flops
        )
        bw = weight_bytes(self.shape, self.dtype) / t_w if t_w > 0 else None
        return {
            "weight_stream_s": t_w,
            "weight_stream_Bps": bw,
            "weight_stream_pct": 100.0 * bw / bandwidth_Bps if bw is not None else None,
            "achieved_gemm_ridge_batch": achieved_gemm_ridge_batch(
                gemm_s, batch=self.batch, gemm_flops_per_seq=f, peak_flops=peak_flops
            ),
        }

    def predict(
        self, bandwidth_Bps: float, peak_flops: float, gemm_s: float | None = None
    ) -> dict[str, Any]:
        """The roofline's figures for this run at the given ceilings; with the decode
        GEMMs' measured time per step ``gemm_s`` (the trace) also :meth:`achieved`'s."""
        times = [s.time_s(bandwidth_Bps, peak_flops) for s in self.steps()]
        tpot = sum(times) / len(times)
        ctx = self.prompt + self.new_tokens
        return {
            "ridge_point": ridge_point(peak_flops, bandwidth_Bps),
            "tpot_s": tpot,
            "tokens_per_s": self.batch / tpot,
            "bytes_per_step": self.mean_bytes_per_step(),
            "flops_per_token": self.mean_flops_per_token(),
            "bandwidth_needed_Bps": self.mean_bytes_per_step() / tpot,
            "gemm_ridge_batch": gemm_ridge_batch(
                self.shape, dtype=self.dtype, peak_flops=peak_flops, bandwidth_Bps=bandwidth_Bps
            ),
            "step_ridge_batch": step_ridge_batch(
                self.shape,
                context=ctx,
                dtype=self.dtype,
                peak_flops=peak_flops,
                bandwidth_Bps=bandwidth_Bps,
            ),
            "last_step_bound": self.step(self.new_tokens - 1).bound(bandwidth_Bps, peak_flops),
            **(
                self.achieved(gemm_s, bandwidth_Bps, peak_flops)
                if gemm_s is not None and gemm_s > 0
                else {}
            ),
        }

"""Analytic memory model of one training step of ``collectors/gpt.py`` (eager PyTorch).

Every term counts the tensors that exist at a moment of the step, op by op, for the
model as ``collectors/gpt.py`` writes it, trained with AdamW and ``zero_grad(set_to_none=True)``
(``collectors/train.py``). The model takes the GPTConfig fields as a plain mapping (the
manifest's ``config.model``), so it needs no torch.

Symbols: B batch, T sequence length, N = B·T tokens, C width, H heads, L layers, V vocab,
P parameters; ``a`` bytes of an activation element (4 for fp32, 2 under bf16/fp16
autocast); ``r`` = 4 bytes of the residual stream and LayerNorm outputs (autocast runs
layer_norm in fp32 and ``x + bf16`` promotes to fp32).

Saved for backward, per block (``block_saved``):

* ln_1 and ln_2 save their fp32 input (the residual, 2·r·N·C) and mean + rstd (2·4·N each);
* each Linear saves its input: ln_1 out (a·NC), ln_2 out (a·NC), attention output after
  ``transpose().contiguous()`` (a·NC, counted with the attention), GELU output (4·a·NC);
* GELU saves its input, the c_fc output (4·a·NC);
* naive attention: ``torch.matmul`` of the transposed (B, H, T, D) views reshapes them
  into contiguous copies that bmm saves: q and k (2·a·NC), v (a·NC); softmax saves its
  output (B·H·T², in fp32: CUDA autocast runs softmax in fp32), and under autocast the
  bf16/fp16 copy of it that ``att @ v`` saves (a·B·H·T²); masked_fill saves the inverted
  causal mask (T² bytes); with dropout > 0 a mask (B·H·T² bytes) and the dropped matrix;
* naive attention's output copy from ``transpose(1, 2).contiguous()`` (a·NC);
* SDPA (flash / memory-efficient): saves q, k, v (views of the c_attn output: the whole
  3·a·NC stays alive), its output (a·NC; laid out as (B, T, H, D), so ``contiguous()``
  copies nothing and c_proj saves the same tensor) and the log-sum-exp (4·B·H·T): no T²
  term.

Outside the blocks: ln_f (r·NC + 8N saved, its output a·NC saved by lm_head), the
log-softmax output of cross-entropy (a·NV; it runs at the logits' dtype) and, under
autocast, the fp32 copy of it that nll_loss saves (4·NV), and the low-precision copies of
every Linear weight (12·C²·L + V·C elements, saved by the graph). (Checked against the
allocator events of the H200 fixtures: a bf16 log_softmax of 103 MB, then a 206 MB copy.)

The peak is the largest of four moments (``phases``):

* ``forward_end``: saved activations + the logits (a·NV);
* ``loss_backward``: saved activations + the gradient of nll_loss (4·NV) and, in fp32,
  log_softmax's backward output (4·NV) allocated while both are alive;
* ``head_backward``: saved activations without the loss's + lm_head's backward: the
  logits' gradient (a·NV) and the weight gradient (a·VC); under autocast then the weight
  gradient, its fp32 cast into the embedding's ``.grad`` (4·VC) and ln_f's output gradient;
* ``attention_backward`` (naive only): the last block's attention backward, its MLP's
  and the head's tensors freed: softmax's backward output (4·BHTT) next to the gradient
  of the attention matrix (a·BHTT, cast to fp32 under autocast: 4·BHTT);
* ``optimizer``: gradients (4P) + AdamW's temporaries: ``_foreach_sqrt``'s 4P for the
  foreach implementation (torch's choice on CUDA), two temporaries of the largest parameter
  for the per-parameter loop (torch's choice on CPU), none for the fused kernel.

The training levers of ``tracekit collect`` (``StepOptions``):

* ``checkpoint`` (activation checkpointing per block, non-reentrant): a block saves only
  its input, the fp32 residual (4·NC), and under autocast no weight copies (they are cast
  again when the block is recomputed); the head and the loss save what they save without
  it. One more moment, ``block_backward``: the last block recomputed in the backward — every
  block input, the embedding's fp32 gradient (4·VC), the residual's gradient (4·NC), the
  block's saved tensors and autocast weight copies, its weight gradients and (naive) the
  attention backward's two fp32 T² temporaries.
* ``grad_accum`` > 1 and ``cuda_graphs``: the gradients (4P) exist at every moment (they
  accumulate over the micro-batches; a replayed graph writes them in place and
  ``zero_grad`` never frees them); the model counts one micro-batch's activations.
* ``optimizer``: which AdamW implementation (above).

Each moment also holds the static memory: parameters (4P, fp32 master weights), AdamW
state (2 × 4P, steady state after the first step), the causal-mask buffers of naive
attention (L·block² bytes) and the pool of 8 token batches (8·B·(T+1)·8 bytes).
Not modelled: library workspaces (cuBLAS/cuBLASLt, ~tens of MiB on a GPU) and caching
allocator rounding; torch.compile changes what is saved (the model is for eager mode).

KV cache for inference (the memory-wall tutorial's formula): 2·B·T·C·L·bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tracekit.classify.models.shape import DTYPE_BYTES, FP32, ModelShape, bytes_per_elem, shape_of
from tracekit.errors import UsageError
from tracekit.manifest import read_manifest

ATTENTIONS = ("naive", "sdpa")
POOL_BATCHES = 8  # collectors/train.py: POOL_BATCHES
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")

# PyTorch's memory-timeline categories (torch/profiler/_memory_profiler.py, Category)
# mapped onto the model's five. Saved tensors the profiler cannot trace to an autograd
# node are 'unknown' (on the H200 fixture: 850 MB of 895 MB of saved activations), so
# 'unknown' counts as activations; 'autograd_detail' is backward's own temporaries
# (the loss gradients at the peak) and goes to 'other' with inputs and temporaries.
TIMELINE_TO_CATEGORY = {
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer_state",
    "activation": "activations",
    "unknown": "activations",
    "autograd_detail": "other",
    "temporary": "other",
    "input": "other",
}
TIMELINE_CATEGORIES = tuple(TIMELINE_TO_CATEGORY)


OPTIMIZERS = ("adamw", "adamw-foreach", "adamw-fused")


@dataclass(frozen=True)
class StepOptions:
    """The training levers of ``tracekit collect`` that change what a step holds."""

    checkpoint: bool = False
    optimizer: str | None = None  # OPTIMIZERS; None: torch's choice (foreach on CUDA)
    grad_accum: int = 1
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise UsageError(
                f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        if isinstance(self.grad_accum, bool) or int(self.grad_accum) < 1:
            raise UsageError(f"grad_accum must be >= 1, got {self.grad_accum!r}")

    def implementation(self, device: str) -> str:
        """The AdamW implementation that runs: the option, else torch's choice."""
        if self.optimizer is not None:
            return self.optimizer
        return "adamw-foreach" if device == "cuda" else "adamw"

    @property
    def grads_held(self) -> bool:
        """Gradients exist before the backward (accumulated, or kept by a CUDA graph)."""
        return self.grad_accum > 1 or self.cuda_graphs

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> StepOptions:
        """From a manifest's ``config`` (absent keys: the defaults)."""
        return cls(
            checkpoint=bool(cfg.get("checkpoint") or False),
            optimizer=cfg.get("optimizer") or None,
            grad_accum=int(cfg.get("grad_accum") or 1),
            cuda_graphs=bool(cfg.get("cuda_graphs") or False),
        )


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one training step; ``peak`` = the largest phase."""

    parameters: int
    gradients_total: int
    optimizer_state: int
    autocast_weights: int
    activations_per_layer: int  # saved by one block
    attention_matrix_per_layer: int  # the T² part of activations_per_layer (0 for SDPA)
    activations_saved: int  # all blocks + ln_f + lm_head input + log-softmax output
    logits: int  # B·T·V at the activation dtype
    buffers: int  # causal masks + token pool
    phases: dict[str, int]
    peak_phase: str
    peak: int
    categories: dict[str, int]  # at the peak phase: CATEGORIES
    kv_cache_inference: int
    options: StepOptions = field(default_factory=StepOptions)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def block_saved(
    shape: ModelShape, batch: int, seq: int, dtype: str, attention: str
) -> tuple[int, int]:
    """(bytes one block saves for backward, the T² part of it)."""
    a, r = DTYPE_BYTES[dtype], FP32
    N, C, H, T = batch * seq, shape.n_embd, shape.n_head, seq
    hid = shape.mlp_hidden
    nc = N * C
    saved = 2 * r * nc + 2 * 2 * FP32 * N  # ln_1/ln_2 inputs + mean/rstd
    saved += 2 * a * nc  # ln_1/ln_2 outputs (cast to a) saved by c_attn / c_fc
    saved += 2 * a * N * hid  # c_fc output (GELU input) + GELU output (mlp.c_proj input)
    t2 = 0
    if attention == "naive":
        saved += 3 * a * nc  # contiguous copies of q, k, v saved by the two bmm
        saved += a * nc  # y.transpose(1, 2).contiguous(), saved by attn.c_proj
        bhtt = batch * H * T * T
        t2 = FP32 * bhtt  # softmax output, fp32 (autocast runs softmax in fp32)
        if a != FP32:
            t2 += a * bhtt  # its low-precision copy, saved by att @ v
        if shape.dropout > 0:
            t2 += bhtt + a * bhtt  # dropout mask (bool) + dropped matrix saved by att @ v
        t2 += T * T  # ~mask saved by masked_fill (bool)
        saved += t2
    elif attention == "sdpa":
        # q, k, v (views of c_attn's output) + the output, which the kernels lay out as
        # (B, T, H, D): transpose(1, 2).contiguous() returns it as is and c_proj saves it.
        saved += 3 * a * nc + a * nc
        saved += FP32 * batch * H * T  # log-sum-exp (dropout: regenerated from the RNG state)
    else:
        raise UsageError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    if shape.dropout > 0:  # attn/mlp residual dropout: the bool masks (add saves nothing)
        saved += 2 * nc
    return saved, t2


@dataclass(frozen=True)
class _Held:
    """The tensors one step holds, in bytes (the terms of the module docstring)."""

    params: int  # fp32 master weights
    grads: int  # fp32 .grad of every parameter
    optim: int  # AdamW's two moments
    autocast: int  # low-precision weight copies (0 in fp32)
    per_layer: int  # saved by one block
    t2: int  # the T² part of per_layer
    loss_saved: int  # log_softmax's output (+ its fp32 copy under autocast)
    head_saved: int  # ln_f's input, mean/rstd and output
    saved: int  # everything saved for backward
    logits: int
    buffers: int  # causal masks + token pool

    @property
    def static(self) -> int:
        return self.params + self.optim + self.buffers

    @property
    def at_backward(self) -> int:
        """Everything held when backward starts."""
        return self.static + self.autocast + self.saved


def _check(dtype: str, attention: str, batch: int, seq: int) -> None:
    bytes_per_elem(dtype)
    if attention not in ATTENTIONS:
        raise UsageError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    if batch < 1 or seq < 1:
        raise UsageError(f"batch and seq must be >= 1, got {batch}, {seq}")


def _held(
    shape: ModelShape, batch: int, seq: int, dtype: str, attention: str, checkpoint: bool = False
) -> _Held:
    a = DTYPE_BYTES[dtype]
    N, C, V, L = batch * seq, shape.n_embd, shape.vocab_size, shape.n_layer
    P = shape.n_params()
    per_layer, t2 = block_saved(shape, batch, seq, dtype, attention)
    kept = FP32 * N * C if checkpoint else per_layer  # a checkpointed block keeps its input
    # cross_entropy = log_softmax + nll_loss. log_softmax runs at the activation dtype and
    # saves its output; under autocast nll_loss (an fp32 op) saves an fp32 copy of it.
    loss_saved = a * N * V + (FP32 * N * V if a != FP32 else 0)
    head_saved = FP32 * N * C + 2 * FP32 * N + a * N * C  # ln_f input + mean/rstd, its output
    masks = L * shape.block_size**2 if attention == "naive" else 0
    tokens = POOL_BATCHES * batch * (seq + 1) * 8
    return _Held(
        params=FP32 * P,
        grads=FP32 * P,
        optim=2 * FP32 * P,
        autocast=(a * (V * C if checkpoint else shape.linear_weights())) if a != FP32 else 0,
        per_layer=per_layer,
        t2=t2,
        loss_saved=loss_saved,
        head_saved=head_saved,
        saved=L * kept + head_saved + loss_saved,
        logits=a * N * V,
        buffers=masks + tokens,
    )


def _phases(
    shape: ModelShape,
    h: _Held,
    batch: int,
    seq: int,
    dtype: str,
    attention: str,
    device: str,
    opts: StepOptions,
) -> dict[str, int]:
    """Bytes held at each moment of the step that can be the peak."""
    a = DTYPE_BYTES[dtype]
    N, C, V, L = batch * seq, shape.n_embd, shape.vocab_size, shape.n_layer
    P = shape.n_params()
    held_grads = FP32 * P if opts.grads_held else 0  # accumulated or kept by a graph
    act = h.at_backward + held_grads
    fwd_end = act + h.logits  # logits are freed once the loss exists
    # nll_loss_backward's gradient (fp32); in fp32 log_softmax's backward then allocates
    # the logits' gradient while it and the saved output are alive.
    loss_transient = FP32 * N * V + (FP32 * N * V if a == FP32 else 0)
    loss_bwd = act + loss_transient
    # lm_head's MmBackward: the logits' gradient (a·NV) and the weight gradient (a·VC); under
    # autocast the weight gradient is then cast into the fp32 .grad (4·VC) of the embedding.
    head_mm = a * N * V + a * V * C
    head_cast = (a * V * C + FP32 * V * C + a * N * C) if a != FP32 else 0
    head_transient = max(head_mm, head_cast)
    head_bwd = act - h.loss_saved + head_transient
    impl = opts.implementation(device)
    opt_tmp = {"adamw-foreach": FP32 * P, "adamw": 2 * FP32 * shape.largest_param()}.get(impl, 0)
    optimizer = h.static + h.grads + opt_tmp
    phases = {
        "forward_end": fwd_end,
        "loss_backward": loss_bwd,
        "head_backward": head_bwd,
        "optimizer": optimizer,
    }
    bhtt = batch * shape.n_head * seq * seq
    attn_transient = 2 * FP32 * bhtt if attention == "naive" else 0
    block_params = (P - V * C - shape.block_size * C) // L
    # gradients at the last block's backward: the embedding's (from lm_head) and the block's
    grads = held_grads or FP32 * V * C + FP32 * block_params
    # what a block's MLP saves (ln_2 input and stats, its output, c_fc and GELU outputs):
    # freed by the time its attention runs backward
    mlp_saved = (FP32 + 10 * a) * N * C + 2 * FP32 * N
    if opts.checkpoint:
        # The last block recomputed: every block input, the residual's gradient, the block's
        # saved tensors and (autocast) its weight copies, all held through its backward;
        # naive: with an attention-matrix gradient (fp32; its low-precision original under
        # autocast). Measured on CPU (tiny, fp32): within 0.1 % of the timeline's peak.
        recomputed = h.per_layer + (a * block_params if a != FP32 else 0)
        base = h.static + L * FP32 * N * C + FP32 * N * C + _block_backward_grads(shape, opts)
        t2_grad = (FP32 + (a if a != FP32 else 0)) * bhtt if attention == "naive" else 0
        phases["block_backward"] = base + recomputed + t2_grad
    elif attention == "naive":
        # The last block's attention backward: its MLP and c_proj tensors are freed by then,
        # the head's too; the embedding's fp32 grad and the block's grads are held. Softmax's
        # backward output (4·BHTT) exists next to the gradient of the attention matrix
        # (a·BHTT, cast to an fp32 copy under autocast: 4·BHTT).
        held = h.at_backward - h.loss_saved - h.head_saved - mlp_saved
        phases["attention_backward"] = held + grads + attn_transient
    return phases


def _block_backward_grads(shape: ModelShape, opts: StepOptions) -> int:
    """Gradients at the recomputed last block's attention backward: all of them when they
    are held, else the embedding's (lm_head's backward) and the block's MLP and ln_2's."""
    if opts.grads_held:
        return FP32 * shape.n_params()
    C, hid, b = shape.n_embd, shape.mlp_hidden, int(shape.bias)
    mlp = 2 * C * hid + b * (hid + C) + (1 + b) * C
    return FP32 * (shape.vocab_size * C + mlp)


def _categories(
    shape: ModelShape, h: _Held, phases: dict[str, int], peak_phase: str, opts: StepOptions
) -> dict[str, int]:
    """The peak phase's bytes split into CATEGORIES."""
    if peak_phase == "optimizer":
        return dict(
            parameters=h.params,
            gradients=h.grads,
            optimizer_state=h.optim,
            activations=0,
            other=phases["optimizer"] - h.params - h.grads - h.optim,
        )
    C, V, L = shape.n_embd, shape.vocab_size, shape.n_layer
    P = shape.n_params()
    if peak_phase == "block_backward":
        g = _block_backward_grads(shape, opts)
        held = phases[peak_phase] - h.static - g  # block inputs, the recomputed block
    else:
        held = {
            "forward_end": h.saved + h.autocast,
            "loss_backward": h.saved + h.autocast,
            "head_backward": h.saved - h.loss_saved + h.autocast,
            "attention_backward": h.saved - h.loss_saved - h.head_saved + h.autocast,
        }[peak_phase]
        if opts.grads_held:
            g = h.grads
        elif peak_phase == "attention_backward":
            g = FP32 * V * C + FP32 * (P - V * C) // max(1, L)
        else:
            g = 0
    return dict(
        parameters=h.params,
        gradients=g,
        optimizer_state=h.optim,
        activations=held,
        other=phases[peak_phase] - h.params - h.optim - held - g,
    )


def estimate(
    model: Mapping[str, Any] | ModelShape,
    *,
    batch: int,
    seq: int,
    dtype: str = "fp32",
    attention: str = "naive",
    device: str = "cuda",
    options: StepOptions | None = None,
) -> MemoryEstimate:
    """The analytic memory of one steady-state training step (see the module docstring);
    ``options``: the training levers the step runs with."""
    shape = shape_of(model)
    _check(dtype, attention, batch, seq)
    opts = options or StepOptions()
    h = _held(shape, batch, seq, dtype, attention, opts.checkpoint)
    phases = _phases(shape, h, batch, seq, dtype, attention, device, opts)
    peak_phase = max(phases, key=lambda k: phases[k])
    cats = _categories(shape, h, phases, peak_phase, opts)
    assert sum(cats.values()) == phases[peak_phase], (cats, phases)
    return MemoryEstimate(
        parameters=h.params,
        gradients_total=h.grads,
        optimizer_state=h.optim,
        autocast_weights=h.autocast,
        activations_per_layer=h.per_layer,
        attention_matrix_per_layer=h.t2,
        activations_saved=h.saved,
        logits=h.logits,
        buffers=h.buffers,
        phases=phases,
        peak_phase=peak_phase,
        peak=phases[peak_phase],
        categories=cats,
        kv_cache_inference=kv_cache_bytes(shape, batch=batch, seq=seq, dtype=dtype),
        options=opts,
    )


def kv_cache_bytes(
    model: Mapping[str, Any] | ModelShape, *, batch: int, seq: int, dtype: str = "bf16"
) -> int:
    """Inference KV cache: keys and values of every layer, 2·B·T·C·L·bytes
    (multi-head attention: kv_head_ratio 1)."""
    return batch * seq * shape_of(model).kv_bytes_per_token(dtype)


def from_manifest(manifest: Mapping[str, Any] | None) -> tuple[MemoryEstimate | None, str]:
    """The estimate for a ``tracekit collect`` run (its manifest's config), or None and why
    not. The second value is a caveat when there is an estimate (torch.compile), else the
    reason there is none."""
    man = read_manifest(manifest) if isinstance(manifest, Mapping) else None
    if man is None or not man.has_config:
        return None, "no run manifest: the analytic model needs the model config"
    cfg = man.config
    seen = dict(man.model.raw)
    if cfg.model is None and "config" in seen and not seen["config"]:
        # a script's model without a configuration (a CNN, a ResNet): no transformer to model
        return None, (
            f"the analytic memory model is of a GPT-style transformer; "
            f"{str(seen.get('class') or 'the model').rsplit('.', 1)[-1]} has no configuration "
            "tracekit could read"
        )
    model = cfg.model or (seen or None)
    if model is None:
        return None, "the manifest has no model config (config.model)"
    if (cfg.workload or "train") != "train":
        return None, "the analytic memory model is of a training step; this run generates"
    if missing := [k for k, v in (("batch", cfg.batch), ("seq", cfg.seq)) if v is None]:
        return None, (
            f"the run's config has no {' or '.join(missing)} (a script whose inputs "
            "tracekit could not read): the analytic model needs both"
        )
    assert cfg.batch is not None and cfg.seq is not None
    try:
        est = estimate(
            model,
            batch=cfg.batch,
            seq=cfg.seq,
            dtype=cfg.dtype or "fp32",
            attention=str(cfg.attention or model.get("attention") or "naive"),
            device=cfg.device or "cuda",
            options=StepOptions.from_config(cfg.raw),
        )
    except (KeyError, TypeError, ValueError, UsageError) as e:
        return None, f"the analytic model does not apply to this run's config ({e})"
    caveats = [
        "torch.compile changes what is saved for backward: the model counts eager mode"
        if cfg.compile
        else "",
        "the model counts one micro-batch's activations (the gradients at every moment)"
        if (cfg.grad_accum or 1) > 1
        else "",
        "the CUDA graph's private memory pool is not modelled" if cfg.cuda_graphs else "",
    ]
    return est, "; ".join(c for c in caveats if c)

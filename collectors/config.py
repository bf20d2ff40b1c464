"""``CollectConfig``: every option of ``tracekit collect``, validated in one place, without
importing torch (a bad flag is refused in a fraction of a second, not after torch's ~5 s
import; the functions that need torch import it when called)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.gpt_config import ATTENTIONS, GPTConfig, preset
from tracekit.collectors.profiler_config import ProfilerConfig
from tracekit.errors import DeviceError, UsageError

if TYPE_CHECKING:
    import torch

DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")
DEVICES: tuple[str, ...] = ("cuda", "cpu")
PARALLELS: tuple[str, ...] = ("ddp", "fsdp")  # with gpus > 1: collectors/distributed.py
WORKLOADS: tuple[str, ...] = ("train", "generate")
# torch.optim.AdamW's three implementations: the per-parameter loop, the multi-tensor
# (foreach) one and the fused kernel.
OPTIMIZERS: tuple[str, ...] = ("adamw", "adamw-foreach", "adamw-fused")
GENERATE_PROMPT, GENERATE_NEW_TOKENS = 128, 64  # --workload generate's defaults


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of ``--dtype`` ``name`` (fp32, bf16, fp16)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def generate_lengths(prompt: int | None, new_tokens: int | None, context: int) -> tuple[int, int]:
    """``--prompt`` and ``--new-tokens`` with the ones not given filled in to fit ``context``
    (the model's block_size): both unset, GENERATE_PROMPT and GENERATE_NEW_TOKENS halved
    together until their sum fits (tiny's 128: 64 + 32); one unset, its default or what the
    other leaves of the context, if less (at least 1). Values given stay as given: a sum
    past the context is the caller's error to report."""
    if prompt is None and new_tokens is None:
        prompt, new_tokens = GENERATE_PROMPT, GENERATE_NEW_TOKENS
        while prompt + new_tokens > context and prompt + new_tokens > 2:
            prompt, new_tokens = max(1, prompt // 2), max(1, new_tokens // 2)
    elif prompt is None:
        assert new_tokens is not None
        prompt = max(1, min(GENERATE_PROMPT, context - new_tokens))
    elif new_tokens is None:
        new_tokens = max(1, min(GENERATE_NEW_TOKENS, context - prompt))
    return prompt, new_tokens


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"--{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class CollectConfig:
    """One ``tracekit collect`` run. Invalid values raise :class:`UsageError`."""

    preset: str = "gpt2-small"
    device: str = "cuda"
    dtype: str = "fp32"
    attention: str = "naive"
    compile: bool = False
    batch: int = 8
    seq: int = 128
    layers: int | None = None
    block_size: int | None = None  # override the preset's context (position embeddings)
    steps: int = 20  # timed, unprofiled steps for the metrics
    warmup: int = 5  # unprofiled steps before anything is timed
    seed: int = 0
    data: Path | None = None  # a text file, tokenised bytewise; None: random tokens
    lr: float = 3e-4
    tf32: bool = False  # allow TF32 for fp32 matmuls (torch.set_float32_matmul_precision)
    workload: str = "train"  # "train" | "generate" (prefill + decode with a KV cache)
    # training levers
    checkpoint: bool = False  # activation checkpointing per block
    optimizer: str | None = None  # None: torch's choice (foreach on CUDA, the loop on CPU)
    grad_accum: int = 1  # micro-batches of `batch` sequences per optimizer step
    cuda_graphs: bool = False  # replay the step as a CUDA graph
    # generate (None: GENERATE_PROMPT / GENERATE_NEW_TOKENS with --workload generate)
    prompt: int | None = None  # prompt tokens per sequence (the prefill)
    new_tokens: int | None = None  # decode steps
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    memory_snapshot: bool = True  # CUDA only
    snapshot_steps: int = 1
    ceilings: bool = True
    out: Path | None = None
    quiet: bool = False
    gpus: int = 1  # processes (one per GPU; on CPU, gloo processes); 1: this process
    parallel: str = "ddp"  # with gpus > 1: DDP or FSDP2 (fully_shard)
    # with gpus > 1: the measured communication cost (collectors/commcost.py); 0 rounds: off
    comm_rounds: int = 6
    comm_steps: int = 5

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UsageError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.attention not in ATTENTIONS:
            raise UsageError(
                f"--attention must be one of {', '.join(ATTENTIONS)}, got {self.attention!r}"
            )
        preset(self.preset)  # unknown preset -> UsageError
        if self.workload not in WORKLOADS:
            raise UsageError(
                f"--workload must be one of {', '.join(WORKLOADS)}, got {self.workload!r}"
            )
        _check_int("batch", self.batch, 1)
        _check_int("seq", self.seq, 1)
        if self.layers is not None:
            _check_int("layers", self.layers, 1)
        if self.block_size is not None:
            _check_int("block-size", self.block_size, 1)
        _check_int("steps", self.steps, 1)
        _check_int("warmup", self.warmup, 0)
        _check_int("seed", self.seed, 0)
        _check_int("snapshot-steps", self.snapshot_steps, 1)
        _check_int("gpus", self.gpus, 1)
        _check_int("comm-rounds", self.comm_rounds, 0)
        _check_int("comm-steps", self.comm_steps, 1)
        if self.parallel not in PARALLELS:
            raise UsageError(
                f"--parallel must be one of {', '.join(PARALLELS)}, got {self.parallel!r}"
            )
        if self.parallel == "fsdp" and self.gpus == 1:
            raise UsageError("--parallel fsdp needs --gpus 2 or more (one rank has no shards)")
        if self.parallel == "fsdp" and self.dtype == "fp16":
            raise UsageError(
                "--parallel fsdp supports --dtype fp32 and bf16 (fp16 loss scaling would need "
                "a GradScaler that agrees across shards)"
            )
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise UsageError(f"--lr must be > 0, got {self.lr!r}")
        model = self.model_config()
        if self.workload == "generate":
            self._check_generate(model.block_size)
        else:
            self._check_train()
            if self.seq > model.block_size:
                raise UsageError(
                    f"--seq {self.seq} exceeds the context of preset {self.preset!r} "
                    f"(block_size {model.block_size}; --block-size sets another)"
                )
        tokens = self.seq if self.workload == "train" else self.prompt_tokens
        if self.data is not None:
            path = Path(self.data)
            if not path.is_file():
                raise UsageError(f"--data {path}: no such file")
            if model.vocab_size < 256:
                raise UsageError(
                    f"--data is tokenised bytewise (256 ids) but preset {self.preset!r} has "
                    f"vocab_size {model.vocab_size}"
                )
            if path.stat().st_size < tokens + 1:
                what = "--seq" if self.workload == "train" else "--prompt"
                raise UsageError(
                    f"--data {path} has {path.stat().st_size} bytes; {what} {tokens} needs "
                    f"at least {tokens + 1}"
                )
        if self.out is not None and Path(self.out).exists() and not Path(self.out).is_dir():
            raise UsageError(f"-o {self.out} exists and is not a folder")

    def _check_train(self) -> None:
        if self.prompt is not None or self.new_tokens is not None:
            raise UsageError("--prompt and --new-tokens need --workload generate")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise UsageError(
                f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        _check_int("grad-accum", self.grad_accum, 1)
        if not isinstance(self.checkpoint, bool) or not isinstance(self.cuda_graphs, bool):
            raise UsageError("--checkpoint and --cuda-graphs are flags (true or false)")
        if self.cuda_graphs:
            if self.device != "cuda":
                raise UsageError(
                    "--cuda-graphs needs --device cuda (a CUDA graph replays captured kernels)"
                )
            if self.dtype == "fp16" and not self.compile:
                raise UsageError(
                    "--cuda-graphs cannot capture the fp16 step: its GradScaler reads the "
                    "inf/NaN flag on the host; use --dtype bf16 or fp32, or add --compile"
                )
            if self.warmup < 1:
                raise UsageError("--cuda-graphs captures the step in warm-up: needs --warmup >= 1")
            if self.gpus > 1:
                raise UsageError(
                    "--cuda-graphs runs on one GPU (capturing DDP/FSDP's collectives is not "
                    "supported here); use --gpus 1"
                )

    def _check_generate(self, block_size: int) -> None:
        # frozen dataclass: resolve the defaults in place so the manifest shows them
        for name, value in (("prompt", self.prompt), ("new-tokens", self.new_tokens)):
            if value is not None:  # given: checked as given; unset: fitted to the context
                _check_int(name, value, 1)
        prompt, new = generate_lengths(self.prompt, self.new_tokens, block_size)
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "new_tokens", new)
        training_only = [
            name
            for name, on in (
                ("--checkpoint", self.checkpoint),
                ("--optimizer", self.optimizer is not None),
                ("--grad-accum", self.grad_accum != 1),
                ("--cuda-graphs", self.cuda_graphs),
                ("--gpus", self.gpus > 1),
            )
            if on
        ]
        if training_only:
            raise UsageError(f"{', '.join(training_only)}: training options; not for generate")
        if self.profiler.repeat != 1:
            raise UsageError(
                f"--profile-repeat {self.profiler.repeat}: generate profiles one generation"
            )
        if self.context > block_size:
            raise UsageError(
                f"--prompt {self.prompt} + --new-tokens {self.new_tokens} = {self.context} "
                f"exceeds the context of preset {self.preset!r} (block_size {block_size}; "
                "--block-size sets another)"
            )

    @property
    def prompt_tokens(self) -> int:
        """Prompt length of a generate run (0 for training)."""
        return int(self.prompt or 0)

    @property
    def decode_steps(self) -> int:
        """Decode steps of a generate run (0 for training)."""
        return int(self.new_tokens or 0)

    @property
    def context(self) -> int:
        """Tokens a generate run's KV cache holds: prompt + new tokens."""
        return self.prompt_tokens + self.decode_steps

    @property
    def optimizer_name(self) -> str:
        """The AdamW implementation that runs: ``--optimizer``, else torch's default for
        the device (foreach on CUDA; on CPU torch has no foreach kernels: the loop)."""
        return self.optimizer if self.optimizer is not None else self.default_optimizer()

    def default_optimizer(self) -> str:
        """What torch's AdamW picks without foreach/fused: foreach on CUDA, the loop on CPU."""
        return "adamw-foreach" if self.device == "cuda" else "adamw"

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one optimizer step: grad_accum micro-batches of batch × seq."""
        return self.grad_accum * self.batch * self.seq

    def model_config(self) -> GPTConfig:
        cfg = preset(self.preset).replace(attention=self.attention)
        if self.layers is not None:
            cfg = cfg.replace(n_layer=self.layers)
        if self.block_size is not None:
            cfg = cfg.replace(block_size=self.block_size)
        return cfg

    def run_name(self) -> str:
        """``<preset>-b<batch>-s<seq>-<dtype>-<attention>[-l<layers>][-compile][-ckpt]
        [-<optimizer>][-ga<K>][-cudagraphs][-g<gpus>-<parallel>][-cpu]``, the optimizer
        where it is not the device's default; generate:
        ``<preset>-generate-b<batch>-p<prompt>-n<new>-<dtype>-<attention>...``."""
        if self.workload == "generate":
            size = [f"b{self.batch}", f"p{self.prompt}", f"n{self.new_tokens}"]
            parts = [self.preset, "generate", *size, self.dtype, self.attention]
        else:
            parts = [self.preset, f"b{self.batch}", f"s{self.seq}", self.dtype, self.attention]
        if self.layers is not None:
            parts.append(f"l{self.layers}")
        if self.block_size is not None:
            parts.append(f"ctx{self.block_size}")
        if self.compile:
            parts.append("compile")
        if self.checkpoint:
            parts.append("ckpt")
        if self.optimizer is not None and self.optimizer != self.default_optimizer():
            parts.append(self.optimizer)
        if self.grad_accum > 1:
            parts.append(f"ga{self.grad_accum}")
        if self.cuda_graphs:
            parts.append("cudagraphs")
        if self.gpus > 1:
            parts.append(f"g{self.gpus}-{self.parallel}")
        if self.device == "cpu":
            parts.append("cpu")
        return "-".join(parts)

    def out_dir(self) -> Path:
        return Path(self.out) if self.out is not None else Path("runs") / self.run_name()

    def replace(self, **changes: Any) -> CollectConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["profiler"] = self.profiler.to_dict()
        d["data"] = str(self.data) if self.data is not None else None
        d["out"] = str(self.out_dir())
        d["optimizer"] = self.optimizer_name if self.workload == "train" else None
        d["model"] = self.model_config().to_dict()
        return d


def compile_unsupported_reason(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot work here (None: it should)."""
    import torch

    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():  # type: ignore[attr-defined]
            return (
                f"torch.compile is not supported with torch {torch.__version__} on "
                f"Python {sys.version_info.major}.{sys.version_info.minor}"
            )
    except Exception as e:  # pragma: no cover - broken installs
        return f"torch.compile is unavailable: {type(e).__name__}: {e}"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "torch.compile's inductor backend needs triton on CUDA; it is not installed"
    else:
        cxx = os.environ.get("CXX") or "g++"
        if not (shutil.which(cxx) or shutil.which("c++") or shutil.which("clang++")):
            return "torch.compile's inductor backend needs a C++ compiler on CPU; none found"
    return None


def resolve_device(cfg: CollectConfig) -> torch.device:
    """The torch device for ``cfg``; a one-line error when it cannot run there."""
    import torch

    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"CUDA was requested but is not available (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda}); run with --device cpu"
            )
        device = torch.device("cuda", torch.cuda.current_device())
        if cfg.dtype == "bf16" and not torch.cuda.is_bf16_supported():
            raise UsageError(
                f"--dtype bf16 is not supported on {torch.cuda.get_device_name(device)}; "
                "use fp16 or fp32"
            )
    else:
        device = torch.device("cpu")
    if cfg.compile:
        reason = compile_unsupported_reason(device)
        if reason:
            raise UsageError(f"--compile: {reason}")
    return device


def config_from_dict(c: dict[str, Any]) -> CollectConfig:
    """A ``CollectConfig`` from a manifest's ``config`` (``to_dict()``'s output): derived
    keys (``model``, ``out``) dropped, the profiler and data path rebuilt."""
    c = dict(c)
    for key in ("model", "out"):
        c.pop(key, None)
    prof = c.get("profiler") or {}
    c["profiler"] = ProfilerConfig(
        **{k: v for k, v in prof.items() if k in ProfilerConfig.__dataclass_fields__}
    )
    c["data"] = Path(c["data"]) if c.get("data") else None
    return CollectConfig(**{k: v for k, v in c.items() if k in CollectConfig.__dataclass_fields__})

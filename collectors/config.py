"""``CollectConfig``: every option of ``tracekit collect``, validated in one place."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tracekit.collectors.gpt import ATTENTIONS, GPTConfig, preset
from tracekit.collectors.profiler import ProfilerConfig
from tracekit.errors import DeviceError, UsageError

DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")
DEVICES: tuple[str, ...] = ("cuda", "cpu")
PARALLELS: tuple[str, ...] = ("ddp", "fsdp")  # with gpus > 1: collectors/distributed.py
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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
    steps: int = 20  # timed, unprofiled steps for the metrics
    warmup: int = 5  # unprofiled steps before anything is timed
    seed: int = 0
    data: Path | None = None  # a text file, tokenised bytewise; None: random tokens
    lr: float = 3e-4
    tf32: bool = False  # allow TF32 for fp32 matmuls (torch.set_float32_matmul_precision)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    memory_snapshot: bool = True  # CUDA only
    snapshot_steps: int = 1
    ceilings: bool = True
    out: Path | None = None
    quiet: bool = False
    gpus: int = 1  # processes (one per GPU; on CPU, gloo processes); 1: this process
    parallel: str = "ddp"  # with gpus > 1: DDP or FSDP2 (fully_shard)

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
        _check_int("batch", self.batch, 1)
        _check_int("seq", self.seq, 1)
        if self.layers is not None:
            _check_int("layers", self.layers, 1)
        _check_int("steps", self.steps, 1)
        _check_int("warmup", self.warmup, 0)
        _check_int("seed", self.seed, 0)
        _check_int("snapshot-steps", self.snapshot_steps, 1)
        _check_int("gpus", self.gpus, 1)
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
        if self.seq > model.block_size:
            raise UsageError(
                f"--seq {self.seq} exceeds the context of preset {self.preset!r} "
                f"(block_size {model.block_size})"
            )
        if self.data is not None:
            path = Path(self.data)
            if not path.is_file():
                raise UsageError(f"--data {path}: no such file")
            if model.vocab_size < 256:
                raise UsageError(
                    f"--data is tokenised bytewise (256 ids) but preset {self.preset!r} has "
                    f"vocab_size {model.vocab_size}"
                )
            if path.stat().st_size < self.seq + 1:
                raise UsageError(
                    f"--data {path} has {path.stat().st_size} bytes; --seq {self.seq} needs "
                    f"at least {self.seq + 1}"
                )
        if self.out is not None and Path(self.out).exists() and not Path(self.out).is_dir():
            raise UsageError(f"-o {self.out} exists and is not a folder")

    def model_config(self) -> GPTConfig:
        cfg = preset(self.preset).replace(attention=self.attention)
        if self.layers is not None:
            cfg = cfg.replace(n_layer=self.layers)
        return cfg

    def run_name(self) -> str:
        """``<preset>-b<batch>-s<seq>-<dtype>-<attention>[-l<layers>][-compile]`` then
        ``[-g<gpus>-<parallel>][-cpu]``."""
        parts = [self.preset, f"b{self.batch}", f"s{self.seq}", self.dtype, self.attention]
        if self.layers is not None:
            parts.append(f"l{self.layers}")
        if self.compile:
            parts.append("compile")
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
        d["model"] = self.model_config().to_dict()
        return d


def compile_unsupported_reason(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot work here (None: it should)."""
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

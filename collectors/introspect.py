"""What a profiling session can learn about a training loop it did not write.

Everything here reads objects the user's code made, without changing what they compute:

* :func:`optimizer_info`: parameter count and bytes per parameter group and the optimizer
  state's bytes, read from ``optimizer.param_groups`` and ``optimizer.state``;
* :func:`find_model`: the ``nn.Module`` that owns the optimizer's parameters, found among
  the live objects (``gc.get_objects``) once, between warm-up steps;
* :func:`model_info`: its class, parameter counts and its configuration where one can be
  read (Hugging Face ``model.config.to_dict()``, a dataclass such as nanoGPT's ``GPTConfig``
  or torchtitan's ``ModelArgs``, a plain dict);
* :class:`InputRecorder`: a forward pre-hook on that module that records the first tensor
  each call gets, so the samples and tokens per step can be inferred.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

# Attributes that hold a model's configuration, in the order they are tried.
CONFIG_ATTRS = ("config", "model_args", "args", "cfg", "params")
# Wrappers whose inner module holds the configuration (torch.compile, DDP/FSDP, HF PEFT).
INNER_ATTRS = ("_orig_mod", "module", "base_model", "model")
# Keyword arguments preferred as "the input" of a forward call, in order.
INPUT_KWARGS = ("input_ids", "pixel_values", "inputs_embeds", "input", "inputs", "x", "images")


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-serialisable data: scalars, lists and string-keyed dicts; other
    objects (tensors, dtypes, classes) by their ``str``; NaN and infinities as ``None``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 6:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return json_safe(value.item(), depth + 1)
    return str(value)


def _tensor_bytes(t: torch.Tensor) -> int:
    return int(t.numel()) * int(t.element_size())


def _unique_params(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
    return out


def _hyper(group: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter group's scalar settings (lr, weight_decay, betas, foreach, fused …)."""
    out: dict[str, Any] = {}
    for k, v in group.items():
        if k == "params":
            continue
        if isinstance(v, torch.Tensor):
            v = v.item() if v.numel() == 1 else None
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = json_safe(v)
        elif isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v):
            out[k] = list(v)
    return out


def optimizer_info(optimizers: Sequence[torch.optim.Optimizer]) -> dict[str, Any]:
    """Parameter groups, parameter and state bytes of the optimizers that stepped.

    ``n_params`` counts each parameter once even if two optimizers share it; the state is
    every tensor in ``optimizer.state`` (AdamW: ``exp_avg``, ``exp_avg_sq``, ``step``)."""
    groups: list[dict[str, Any]] = []
    state_bytes = 0
    state_dtypes: dict[str, int] = {}
    for oi, opt in enumerate(optimizers):
        for gi, group in enumerate(opt.param_groups):
            params = list(group["params"])
            dtypes: dict[str, int] = {}
            for p in params:
                key = str(p.dtype).removeprefix("torch.")
                dtypes[key] = dtypes.get(key, 0) + int(p.numel())
            groups.append(
                {
                    "optimizer": oi,
                    "group": gi,
                    "n_tensors": len(params),
                    "numel": sum(int(p.numel()) for p in params),
                    "bytes": sum(_tensor_bytes(p) for p in params),
                    "numel_by_dtype": dtypes,
                    "settings": _hyper(group),
                }
            )
        for st in opt.state.values():
            for v in st.values() if isinstance(st, Mapping) else ():
                if isinstance(v, torch.Tensor):
                    state_bytes += _tensor_bytes(v)
                    key = str(v.dtype).removeprefix("torch.")
                    state_dtypes[key] = state_dtypes.get(key, 0) + _tensor_bytes(v)
    params = _unique_params(optimizers)
    return {
        "classes": [type(o).__name__ for o in optimizers],
        "n_params": sum(int(p.numel()) for p in params),
        "n_tensors": len(params),
        "param_bytes": sum(_tensor_bytes(p) for p in params),
        "grad_bytes": sum(_tensor_bytes(p) for p in params if p.requires_grad),
        "state_bytes": state_bytes,
        "state_bytes_by_dtype": state_dtypes,
        "param_groups": groups,
        "method": "optimizer.param_groups (each parameter once) and every tensor in "
        "optimizer.state, read after the timed steps; grad_bytes: the parameters that "
        "require grad, at their own dtype",
    }


def _module_size(m: torch.nn.Module) -> int:
    return sum(1 for _ in m.modules())


def find_model(
    params: Sequence[torch.Tensor], candidates: Iterable[object] | None = None
) -> torch.nn.Module | None:
    """The outermost live ``nn.Module`` holding the most of ``params``.

    Parameters do not point back at their module, so the live objects are searched
    (``gc.get_objects()``, once). Among modules holding the largest share of the
    optimizer's parameters, the one with the most submodules wins: a ``torch.compile``
    or DDP wrapper over the model, rather than the model inside it."""
    wanted = {id(p) for p in params}
    if not wanted:
        return None
    objs = gc.get_objects() if candidates is None else candidates
    best: tuple[int, int] | None = None
    found: torch.nn.Module | None = None
    module_type = torch.nn.Module
    for obj in objs:
        # type(), not isinstance(): some objects warn when their __class__ is read
        # (torch.distributed.reduce_op)
        if not issubclass(type(obj), module_type):
            continue
        assert isinstance(obj, torch.nn.Module)
        try:
            hits = sum(1 for p in obj.parameters() if id(p) in wanted)
        except Exception:  # a half-built module: skip it
            continue
        if hits == 0:
            continue
        key = (hits, _module_size(obj))
        if best is None or key > best:
            best, found = key, obj
    return found


def _config_of(obj: Any) -> tuple[dict[str, Any], str] | None:
    for attr in CONFIG_ATTRS:
        cfg = getattr(obj, attr, None)
        if cfg is None or isinstance(cfg, (torch.Tensor, torch.nn.Module)) or callable(cfg):
            continue
        name = f"{type(obj).__name__}.{attr}"
        to_dict = getattr(cfg, "to_dict", None)
        if callable(to_dict):
            try:
                d = to_dict()
            except Exception:
                d = None
            if isinstance(d, Mapping):
                return json_safe(d), f"{name}.to_dict()"
        if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
            return json_safe(dataclasses.asdict(cfg)), f"dataclasses.asdict({name})"
        if isinstance(cfg, Mapping):
            return json_safe(dict(cfg)), name
    return None


def model_config(model: torch.nn.Module) -> tuple[dict[str, Any] | None, str]:
    """The model's configuration and where it came from, looking through wrappers."""
    seen: set[int] = set()
    todo: list[Any] = [model]
    while todo:
        obj = todo.pop(0)
        if id(obj) in seen or not isinstance(obj, torch.nn.Module):
            continue
        seen.add(id(obj))
        got = _config_of(obj)
        if got is not None:
            return got
        todo.extend(getattr(obj, a, None) for a in INNER_ATTRS)
    return None, (
        f"no configuration found on {type(model).__name__} (looked for a "
        f"{'/'.join(CONFIG_ATTRS)} attribute with to_dict(), a dataclass or a dict)"
    )


def model_info(
    model: torch.nn.Module | None, optimizer_params: int | None, why_absent: str
) -> dict[str, Any]:
    """The manifest's ``model`` entry: ``n_params`` is the optimizer's parameter count (the
    tensors its update touches), the module's own counts beside it."""
    out: dict[str, Any] = {
        "n_params": optimizer_params,
        "n_params_source": "the optimizer's param_groups" if optimizer_params else None,
        "class": None,
        "module_params": None,
        "module_trainable_params": None,
        "module_buffers_bytes": None,
        "config": None,
        "config_source": why_absent,
    }
    if model is None:
        return out
    params = list(model.parameters())
    out["class"] = f"{type(model).__module__}.{type(model).__qualname__}"
    out["module_params"] = sum(int(p.numel()) for p in params)
    out["module_trainable_params"] = sum(int(p.numel()) for p in params if p.requires_grad)
    out["module_buffers_bytes"] = sum(_tensor_bytes(b) for b in model.buffers())
    out["config"], out["config_source"] = model_config(model)
    return out


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, Any] | None:
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            return f"args[{i}]", a
    for k in INPUT_KWARGS:
        if isinstance(kwargs.get(k), torch.Tensor):
            return k, kwargs[k]
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            return k, v
    return None


class InputRecorder:
    """Forward pre-hook: the first tensor argument of each call of the model, per step.

    Samples per step: the sum of its leading dimension over the step's calls (gradient
    accumulation: several forward calls per optimizer step). Tokens per step: the sum of
    ``batch × sequence`` when that tensor is a 2-D integer tensor (token ids)."""

    def __init__(self) -> None:
        self.enabled = False
        self.calls: list[tuple[str, tuple[int, ...], str]] = []  # the current step's
        self.steps: list[list[tuple[str, tuple[int, ...], str]]] = []

    def __call__(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.enabled or torch.compiler.is_compiling():
            return None
        got = _first_tensor(args, kwargs)
        if got is not None:
            name, t = got
            self.calls.append((name, tuple(int(s) for s in t.shape), str(t.dtype)))
        return None

    def end_step(self) -> None:
        if self.enabled:
            self.steps.append(self.calls)
        self.calls = []

    def summary(self) -> dict[str, Any] | None:
        """Samples and tokens per step over the recorded steps (None: nothing recorded)."""
        steps = [s for s in self.steps if s]
        if not steps:
            return None
        samples = [sum(c[1][0] if c[1] else 1 for c in s) for s in steps]
        first = steps[0][0]
        ids = first[2].removeprefix("torch.") in ("int64", "int32", "long", "int")
        tokens = (
            [sum(c[1][0] * c[1][1] for c in s if len(c[1]) == 2) for s in steps]
            if ids and len(first[1]) == 2
            else None
        )
        return {
            "argument": first[0],
            "shape": list(first[1]),
            "dtype": first[2],
            "calls_per_step": _median([len(s) for s in steps]),
            "samples_per_step": _median(samples),
            "samples_per_step_range": [min(samples), max(samples)],
            "tokens_per_step": _median(tokens) if tokens else None,
            "steps": len(steps),
        }


def _median(values: list[int]) -> int | float:
    """The median, as an int when it is one (JSON: 8, not 8.0)."""
    m = statistics.median(values)
    return int(m) if float(m).is_integer() else float(m)

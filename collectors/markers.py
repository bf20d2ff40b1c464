"""Step markers: how ``tracekit run`` hears that a step of a script it did not write ended.

* ``optimizer`` (default): the first ``torch.optim`` optimizer that steps; each of its
  ``step()`` calls ends a step. A global post-step hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``) finds it; from then on an
  instance wrapper around its ``step`` reports the end *after* ``step()`` returned, outside
  torch's ``Optimizer.step#…`` profiler range (the hooks run inside it, and a profiler step
  ending there would cut that range in two). A ``GradScaler`` step skipped for inf/NaN
  gradients calls no ``optimizer.step()`` and ends no step.
* ``function:NAME`` / ``function:Class.method``: a function of the script itself, defined
  at its top level (also inside ``if __name__ == "__main__":``); each call that returns
  ends a step. ``function:module:qualname``: the same for a function of an importable
  module (e.g. ``function:trainer:Trainer.train_step``).
* ``cuda-graph``: each replay of the first CUDA graph replayed
  (``torch.cuda.CUDAGraph.replay``): for loops that capture the whole step in one graph.

The callback runs outside ``torch.compile`` (``torch.compiler.disable``), so a marked
function that is later compiled keeps its step ends.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from tracekit.errors import UsageError

KINDS = ("optimizer", "function:NAME", "function:module:qualname", "cuda-graph")
MARK_NAME = "__tracekit_step_marker__"

NO_STEP_HINT = (
    "mark steps another way with --step-marker function:NAME (a function of the script "
    "called once per step) or --step-marker cuda-graph"
)


class Marker:
    """Calls ``on_step`` at each step end once :meth:`install`-ed."""

    spec = ""
    definition = ""

    def install(self, on_step: Callable[[], None], namespace: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    def transform(self, tree: ast.Module, filename: str) -> ast.Module:
        """The script's syntax tree, changed if this marker needs it (default: as is)."""
        return tree

    def no_step_message(self) -> str:
        raise NotImplementedError


def _guarded(on_step: Callable[[], None]) -> Callable[[], None]:
    guarded: Callable[[], None] = torch.compiler.disable(on_step)  # type: ignore[no-untyped-call]
    return guarded


class OptimizerMarker(Marker):
    spec = "optimizer"
    definition = (
        "from the return of one optimizer.step() to the next (the first torch.optim "
        "optimizer that stepped)"
    )

    def __init__(self) -> None:
        self.primary: torch.optim.Optimizer | None = None
        self._on_step: Callable[[], None] | None = None
        self._handle: Any = None
        self._depth = 0
        self._pending = False
        self._active = False
        self._bound: Any = None
        self._prev: Any = None
        self._had_attr = False

    def install(self, on_step: Callable[[], None], namespace: dict[str, Any] | None) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._on_step = _guarded(on_step)
        self._active = True
        self._handle = register_optimizer_step_post_hook(self._post_step)

    def _post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._active or self._on_step is None:
            return
        if self.primary is None:
            self.primary = opt
            self._wrap(opt)
            # The first step's end is reported from inside Optimizer.step: no profiler runs
            # yet (the first step is always a warm-up step).
            self._on_step()
        elif opt is self.primary:
            if self._depth > 0:
                self._pending = True  # reported by the wrapper once step() returned
            else:  # step() was reached around the wrapper (e.g. a compiled bound method)
                self._on_step()

    def _wrap(self, opt: torch.optim.Optimizer) -> None:
        prev = opt.step
        marker = self

        def step(this: Any, *args: Any, **kwargs: Any) -> Any:
            marker._depth += 1
            try:
                out = prev(*args, **kwargs)
            finally:
                marker._depth -= 1
            if marker._pending and marker._depth == 0:
                marker._pending = False
                if marker._active and marker._on_step is not None:
                    marker._on_step()
            return out

        functools.update_wrapper(step, getattr(prev, "__func__", prev))
        if hasattr(prev, "_wrapped_by_lr_sched"):  # LR schedulers test it before wrapping
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        self._had_attr = "step" in opt.__dict__
        self._prev = prev
        # A bound method, as LR schedulers expect (they wrap opt.step.__func__).
        self._bound = types.MethodType(step, opt)
        opt.step = self._bound  # type: ignore[method-assign]

    def remove(self) -> None:
        self._active = False
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        opt = self.primary
        if opt is not None and opt.__dict__.get("step") is self._bound:
            if self._had_attr:
                opt.step = self._prev  # type: ignore[method-assign]
            else:
                del opt.step
        self.primary = None

    def no_step_message(self) -> str:
        return f"no torch.optim optimizer stepped; {NO_STEP_HINT}"


def _wrap_callable(raw: Any, on_step: Callable[[], None], label: str) -> Any:
    """``raw`` (a function, staticmethod or classmethod) wrapped to call ``on_step`` after
    each call that returns."""
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if kind is not None else raw
    if not callable(fn):
        raise UsageError(f"--step-marker function:{label}: {label} is not a function")
    if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
        raise UsageError(
            f"--step-marker function:{label}: a coroutine or generator function does not "
            "end when its call returns; mark a plain function"
        )

    @functools.wraps(fn)
    def marked(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        on_step()
        return out

    marked.__tracekit_marked__ = True  # type: ignore[attr-defined]
    return kind(marked) if kind is not None else marked


class FunctionMarker(Marker):
    """``function:NAME`` (the script's own) or ``function:module:qualname``."""

    def __init__(self, target: str) -> None:
        module, _, qualname = target.rpartition(":")
        if not qualname or not all(p.isidentifier() for p in qualname.split(".")):
            raise UsageError(
                f"--step-marker function:{target}: expected function:NAME, "
                "function:Class.method or function:module:qualname"
            )
        if module and not all(p.isidentifier() for p in module.split(".")):
            raise UsageError(f"--step-marker function:{target}: {module!r} is no module name")
        self.module = module or None
        self.qualname = qualname
        self.spec = f"function:{target}"
        self.definition = f"from the return of one call of {target} to the next"
        self.calls = 0
        self._on_step: Callable[[], None] | None = None
        self._restore: list[tuple[Any, str, Any]] = []
        self._namespace: dict[str, Any] | None = None
        self._found_in_script = False

    @property
    def local(self) -> bool:
        return self.module is None

    def transform(self, tree: ast.Module, filename: str) -> ast.Module:
        """Insert ``__tracekit_step_marker__()`` after each top-level definition of the
        marked name (also in ``if``/``try``/``with`` blocks, not inside functions)."""
        if not self.local:
            return tree
        head = self.qualname.split(".")[0]

        def visit(body: list[ast.stmt]) -> list[ast.stmt]:
            out: list[ast.stmt] = []
            for stmt in body:
                for attr in ("body", "orelse", "finalbody"):
                    if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)) and (
                        isinstance(getattr(stmt, attr, None), list)
                    ):
                        setattr(stmt, attr, visit(getattr(stmt, attr)))
                if isinstance(stmt, ast.Try):
                    for h in stmt.handlers:
                        h.body = visit(h.body)
                out.append(stmt)
                if (
                    isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and stmt.name == head
                ):
                    call = ast.Expr(ast.Call(ast.Name(MARK_NAME, ast.Load()), args=[], keywords=[]))
                    out.append(ast.copy_location(call, stmt))
                    self._found_in_script = True
            return out

        tree.body = visit(tree.body)
        ast.fix_missing_locations(tree)
        if not self._found_in_script:
            raise UsageError(
                f"--step-marker {self.spec}: {filename} defines no {head} at its top level "
                "(function:NAME marks a function or Class.method defined at the script's top "
                "level; use function:module:qualname for a function of an importable module)"
            )
        return tree

    def install(self, on_step: Callable[[], None], namespace: dict[str, Any] | None) -> None:
        self._on_step = _guarded(on_step)
        if self.local:
            if namespace is None:
                raise UsageError(
                    f"--step-marker {self.spec}: a function of the script needs a script "
                    "path (with -m use function:module:qualname)"
                )
            self._namespace = namespace
            namespace[MARK_NAME] = self._wrap_local
            return
        try:
            mod = importlib.import_module(str(self.module))
        except Exception as e:
            raise UsageError(
                f"--step-marker {self.spec}: cannot import {self.module} ({type(e).__name__}: {e})"
            ) from None
        self._wrap_in(mod, lambda name: getattr(mod, name, None))

    def _count(self) -> None:
        self.calls += 1
        assert self._on_step is not None
        self._on_step()

    def _wrap_local(self) -> None:
        ns = self._namespace
        assert ns is not None
        self._wrap_in(ns, ns.get)

    def _wrap_in(self, root: Any, lookup: Callable[[str], Any]) -> None:
        parts = self.qualname.split(".")
        owner: Any = None
        value = lookup(parts[0])
        for p in parts[1:]:
            owner, value = value, inspect.getattr_static(value, p, None)
        if value is None:
            where = self.module or "the script"
            raise UsageError(f"--step-marker {self.spec}: {where} has no {self.qualname}")
        if getattr(getattr(value, "__func__", value), "__tracekit_marked__", False):
            return
        wrapped = _wrap_callable(value, self._count, self.qualname)
        if owner is None:
            if isinstance(root, dict):
                self._restore.append((root, parts[0], root[parts[0]]))
                root[parts[0]] = wrapped
            else:
                self._restore.append((root, parts[0], value))
                setattr(root, parts[0], wrapped)
        else:
            self._restore.append((owner, parts[-1], value))
            setattr(owner, parts[-1], wrapped)

    def remove(self) -> None:
        for obj, name, value in reversed(self._restore):
            if isinstance(obj, dict):
                obj[name] = value
            else:
                setattr(obj, name, value)
        self._restore.clear()
        if self._namespace is not None:
            self._namespace.pop(MARK_NAME, None)

    def no_step_message(self) -> str:
        if self.calls == 0:
            return (
                f"{self.qualname} was never called (--step-marker {self.spec}); mark the "
                "function the loop calls once per step"
            )
        return f"{self.qualname} returned {self.calls} times"


class CudaGraphMarker(Marker):
    spec = "cuda-graph"
    definition = "from one replay of the first CUDA graph replayed to the next"

    def __init__(self) -> None:
        self.replays = 0
        self.primary: Any = None
        self._orig: Any = None
        self._cls: Any = None

    def install(self, on_step: Callable[[], None], namespace: dict[str, Any] | None) -> None:
        cls = torch.cuda.CUDAGraph
        orig = cls.replay
        marker = self
        guarded = _guarded(on_step)

        @functools.wraps(orig)
        def replay(graph: Any) -> None:
            orig(graph)
            marker.replays += 1
            if marker.primary is None:
                marker.primary = graph
            if graph is marker.primary:
                guarded()

        self._cls, self._orig = cls, orig
        cls.replay = replay  # type: ignore[method-assign,assignment]

    def remove(self) -> None:
        if self._cls is not None:
            self._cls.replay = self._orig
            self._cls = None
        self.primary = None

    def no_step_message(self) -> str:
        return "no CUDA graph was replayed (--step-marker cuda-graph)"


def make_marker(spec: str) -> Marker:
    """The marker for ``--step-marker SPEC``."""
    if spec == "optimizer":
        return OptimizerMarker()
    if spec == "cuda-graph":
        return CudaGraphMarker()
    if spec.startswith("function:"):
        return FunctionMarker(spec.removeprefix("function:"))
    raise UsageError(f"--step-marker must be one of {', '.join(KINDS)}, got {spec!r}")

"""The collect runs' test hook: ``TRACEKIT_TEST_FAULT=RANKS:STEP:ACTION`` makes the named
ranks (``*``: all; a single-process run is rank 0) raise, run out of memory or hang at a
forward pass, so that tests can exercise a run's failures (``collectors/rank.py``,
``collectors/collect.py``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

FAULT_ENV = "TRACEKIT_TEST_FAULT"
FAULT_DIR_ENV = "TRACEKIT_TEST_FAULT_DIR"


def fault_hook(rank: int) -> Callable[[torch.nn.Module], None] | None:
    """Install the test hook of :data:`FAULT_ENV` on the model, if it names this rank."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return None
    ranks, step, action = spec.split(":")
    if ranks != "*" and rank not in {int(r) for r in ranks.split(",")}:
        return None
    at = int(step)

    def install(model: torch.nn.Module) -> None:
        calls = {"n": 0}

        def pre(module: torch.nn.Module, args: Any) -> None:
            calls["n"] += 1
            if calls["n"] - 1 != at:
                return
            if action == "raise":
                raise RuntimeError(f"injected failure at step {at}")
            if action == "oom":
                raise torch.OutOfMemoryError(f"CUDA out of memory (injected at step {at})")
            if action == "hang":
                folder = os.environ.get(FAULT_DIR_ENV)
                if folder:
                    (Path(folder) / f"rank{rank}.pid").write_text(str(os.getpid()))
                while True:
                    time.sleep(1)

        model.register_forward_pre_hook(pre)

    return install

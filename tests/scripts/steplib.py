"""A helper module the manual-SGD script imports (a marked function may live in a module)."""

import torch


@torch.no_grad()
def sgd_update(params, lr: float) -> None:
    for p in params:
        p -= lr * p.grad
        p.grad = None

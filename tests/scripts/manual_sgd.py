"""Training without torch.optim: a hand-written SGD update, one call of train_step per step."""

import torch
from steplib import sgd_update
from torch import nn


def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    sgd_update(model.parameters(), lr=0.01)
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    for _ in range(30):
        train_step(model, x, y)

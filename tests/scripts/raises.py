"""A training loop whose data fails at iteration 3."""

import torch
from torch import nn


def load_batch(i: int) -> torch.Tensor:
    if i == 3:
        raise ValueError(f"corrupt batch {i}")
    return torch.randn(4, 8)


def train() -> None:
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(30):
        loss = model(load_batch(i)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    train()

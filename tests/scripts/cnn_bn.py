"""A small CNN with batch-norm and pooling, SGD with momentum, on random images."""

import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


torch.manual_seed(0)
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 30
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
images = torch.randn(8, 3, 16, 16)
labels = torch.randint(0, 10, (8,))
model.train()
for _ in range(iters):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()

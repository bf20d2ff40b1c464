"""Gradient accumulation: the optimizer steps once every 4 micro-batches."""

import torch
from torch import nn

ACCUM = 4
MICRO_BATCH, SEQ, VOCAB = 2, 8, 50


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(tokens).mean(dim=1))


def batches():
    g = torch.Generator().manual_seed(0)
    while True:
        yield (
            torch.randint(0, VOCAB, (MICRO_BATCH, SEQ), generator=g),
            torch.randint(0, 5, (MICRO_BATCH,), generator=g),
        )


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BagClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = batches()
    for micro in range(30 * ACCUM):
        tokens, labels = next(data)
        loss = nn.functional.cross_entropy(model(tokens), labels) / ACCUM
        loss.backward()
        if (micro + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad()

"""Steps driven by CUDA graph replays: a forward graph and a backward graph per step, as
torch.cuda.make_graphed_callables produces. Without a GPU the test replaces
torch.cuda.CUDAGraph.replay by a function that runs ``graph.work()``."""

import torch
from torch import nn


class Captured:
    """Stands in for a captured torch.cuda.CUDAGraph (on CPU no graph can be made)."""

    def __init__(self, work):
        self.work = work


model = nn.Linear(8, 8)
x = torch.randn(4, 8)
state = {}


def forward():
    state["loss"] = model(x).square().mean()


def backward():
    state["loss"].backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None


fwd_graph, bwd_graph = Captured(forward), Captured(backward)
for _ in range(30):
    torch.cuda.CUDAGraph.replay(fwd_graph)
    torch.cuda.CUDAGraph.replay(bwd_graph)

"""A naive SWARM layer for benchmarking: every projection per entity per iteration, the pooled
vector broadcast to every entity before its projection, the input projected again each iteration."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class NaiveSwarmLayer(nn.Module):
    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int, n_iter: int) -> None:
        super().__init__()
        self.n_iter = n_iter
        self.dim_hidden = dim_hidden
        self.wx = nn.Linear(dim_in, 4 * dim_hidden)
        self.wh = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False)
        self.wp = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False)
        self.out = nn.Linear(2 * dim_hidden, dim_out)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        B, N, _ = x.shape
        H = self.dim_hidden
        m = mask.unsqueeze(-1).to(x.dtype)  # (B, N, 1)
        h = x.new_zeros(B, N, H)
        c = x.new_zeros(B, N, H)
        for _ in range(self.n_iter):
            p = (h * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)  # (B, 1, H)
            a = self.wx(x) + self.wh(h) + self.wp(p.expand(B, N, H))  # (B, N, 4H)
            i, f, o, g = a.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.out(torch.cat([h, c], -1))

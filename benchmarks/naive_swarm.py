"""Baseline SWARM layers for the throughput benchmark; both compute the same function as swarmctl's layer.

``AuthorsSwarmLayer`` (the default baseline) follows the authors' formulation (zalandoresearch/SWARM,
``swarmlayer.py``, as used for direct clustering): channels-first 1x1 convolutions, the input
projection cached after the first iteration, the zero-state first iteration without the recurrent and
population terms, the masked mean of h broadcast to every entity *before* its projection (one Wp
product per entity), and the LSTM gates as plain autograd ops on slices.

``PerEntitySwarmLayer`` is a cruder naive layer: the reference formulation of swarmctl's tests
(``swarmctl.testing.reference_swarm_states``), channels-last linear maps with every projection, the input
one included, recomputed per entity in every iteration (from zero states).

``load_from`` copies a swarmctl ``SwarmLayer``'s weights, so that outputs can be compared.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from swarmctl.layers.swarm import SwarmLayer
from swarmctl.testing import reference_swarm_states


class AuthorsSwarmLayer(nn.Module):
    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int, n_iter: int) -> None:
        super().__init__()
        self.n_iter = n_iter
        self.dim_hidden = dim_hidden
        self.wih = nn.Conv1d(dim_in, 4 * dim_hidden, 1, bias=True)
        self.whh = nn.Conv1d(dim_hidden, 4 * dim_hidden, 1, bias=False)
        self.whp = nn.Conv1d(dim_hidden, 4 * dim_hidden, 1, bias=False)
        self.ffwd = nn.Conv1d(2 * dim_hidden, dim_out, 1, bias=True)

    def load_from(self, layer: nn.Module) -> AuthorsSwarmLayer:
        cell = layer.cell
        with torch.no_grad():
            for conv, lin in ((self.wih, cell.input), (self.whh, cell.recurrent), (self.whp, cell.population),
                              (self.ffwd, layer.output)):
                conv.weight.copy_(lin.weight.unsqueeze(-1))
                if lin.bias is not None:
                    conv.bias.copy_(lin.bias)
        return self

    def _pool(self, h: Tensor, mask: Tensor | None) -> Tensor:
        if mask is None:
            return h.mean(dim=2, keepdim=True).expand(h.shape)
        m = mask.view(h.shape[0], 1, -1).float()
        return (h * m).sum(dim=2, keepdim=True).expand(h.shape) / m.sum(dim=2, keepdim=True).expand(h.shape)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = x.transpose(1, 2)  # (B, D, N): the authors' channels-first layout
        B, _, N = x.shape
        H = self.dim_hidden
        x_cache = None
        h = c = None
        for _ in range(self.n_iter):
            if h is None:
                c = x.new_zeros(B, H, N)
                x_cache = self.wih(x)
                a = x_cache
            else:
                a = x_cache + self.whh(h) + self.whp(self._pool(h, mask))
            a = a.view(B, 4, H, N)
            i, f, o, g = torch.sigmoid(a[:, 0]), torch.sigmoid(a[:, 1]), torch.sigmoid(a[:, 2]), torch.tanh(a[:, 3])
            c = c * f + g * i
            h = o * torch.tanh(c)
        return self.ffwd(torch.cat((h, c), dim=1)).transpose(1, 2)


class PerEntitySwarmLayer(nn.Module):
    """A swarmctl layer's weights run through ``swarmctl.testing.reference_swarm_states``, the reference
    the layer's tests use."""

    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int, n_iter: int) -> None:
        super().__init__()
        self.layer = SwarmLayer(dim_in, dim_hidden, dim_out, n_iter)

    def load_from(self, layer: nn.Module) -> PerEntitySwarmLayer:
        self.layer.load_state_dict(layer.state_dict())
        return self

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.layer.output(torch.cat(reference_swarm_states(self.layer, x, mask), -1))


BASELINES = {"authors": AuthorsSwarmLayer, "per-entity": PerEntitySwarmLayer}

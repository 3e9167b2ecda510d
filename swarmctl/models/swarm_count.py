"""A SWARM clustering model that also predicts how many clusters its set holds: the SWARM stack of
arXiv:1906.09400 (Sec. 3) with a small head on the pooled final state of its last layer.

The idea, from amortized clustering with a learned number of clusters (Deep Amortized Clustering, Neural
Clustering Processes, prior-fitted networks for clustering): the network that clusters a set has seen many
sets drawn from a prior, so the same pass can give a distribution over the number K of clusters, trained
with cross-entropy on the true K beside the clustering loss.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from swarmctl.config import ModelConfig
from swarmctl.layers.pooling import mask_weights, masked_mean
from swarmctl.models.registry import register_model
from swarmctl.models.swarm import SwarmNet


class SwarmCountNet(SwarmNet):
    """:class:`SwarmNet` plus a count head: ``forward`` gives the per-entity cluster logits (B, N, D_out) as
    SwarmNet's, :meth:`forward_with_count` those and the logits (B, D_out) of the number of clusters in each
    set, class j meaning j + 1 clusters and the last class ``D_out`` clusters or more.

    The head reads the masked mean over the set's real entities of the last layer's final states [h; c]
    (2H) and of the entities' cluster probabilities (D_out: how much of the set each output slot takes),
    through one hidden layer of H units: one vector per set, so the count is permutation-invariant and
    masked entities have no influence on it.
    """

    def __init__(self, dim_in: int, dim_out: int, dim_hidden: int, n_iter: int, n_layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__(dim_in, dim_out, dim_hidden, n_iter, n_layers, pooling="mean", dropout=dropout)
        self.count = nn.Sequential(nn.Linear(2 * dim_hidden + dim_out, dim_hidden), nn.ReLU(),
                                   nn.Linear(dim_hidden, dim_out))

    def forward_with_count(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (B, N, D_in), mask (B, N) bool (True = present; None: all) -> (cluster logits (B, N, D_out), count
        logits (B, D_out))."""
        final: list[Tensor] = []  # the last layer's final states [h; c] (B, N, 2H)

        def step(k: int, layer: nn.Module, u: Tensor) -> Tensor:
            if k < len(self.layers) - 1:
                return layer(u, mask)
            final.append(torch.cat(layer.states(u, mask), dim=-1))
            return layer.output(final[0])

        logits = self.through_layers(x, step)  # (B, N, D_out), as forward gives them
        state = final[0]
        weights = mask_weights(mask, state.dtype)
        pooled = torch.cat([masked_mean(state, weights=weights), masked_mean(logits.softmax(-1), weights=weights)],
                           dim=-1)  # (B, 2H + D_out)
        return logits, self.count(pooled)

    def count_distribution(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """The probabilities (B, D_out) of 1, 2, ..., D_out or more clusters in each set."""
        return self.forward_with_count(x, mask)[1].softmax(-1)


@register_model(
    "swarm-count",
    code=("dim_hidden", "n_iter", "n_layers"),
    defaults={"dim_hidden": 192, "n_iter": 10, "n_layers": 1},
    summary="SWARM layers and a head for the number of clusters",
    extra_fields=("dropout",),
)
def build_swarm_count(cfg: ModelConfig) -> SwarmCountNet:
    return SwarmCountNet(cfg.dim_in, cfg.dim_out, dim_hidden=cfg.dim_hidden, n_iter=cfg.n_iter,
                         n_layers=cfg.n_layers, dropout=cfg.dropout)

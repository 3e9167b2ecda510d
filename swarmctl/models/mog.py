"""Models that predict a mixture's parameters from a set of points (arXiv:1906.09400, Sec. 4.2):
SWARM + mean pooling, SWARM + PMA decoder, and a Set Transformer baseline.

Every model maps x (B, N, 2), mask (B, N) bool (True = present) to raw parameters (B, K, 5): per
cluster [mean (2), pre-softplus standard deviation (2), mixture logit]; :func:`mixture_parameters`
turns them into (means, stds, log weights).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swarmctl.config import ModelConfig
from swarmctl.data.mog import MogParams
from swarmctl.errors import ConfigError
from swarmctl.layers.pooling import check_set_input, masked_mean, zero_padded
from swarmctl.layers.set_attention import ISAB, PMA, SAB
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.models.registry import check_heads_divide_hidden, register_model

N_CLUSTERS = MogParams.n_clusters  # components per mixture
PARAMS_PER_CLUSTER = 5  # mean (2), std (2), logit


# The smallest standard deviation a model predicts: without it float32 overflows where a deviation collapses
# (docs/design.md, "MoG standard deviations"; benchmarks/RESULTS.md, "MoG divergence on the CPU").
MIN_STD = 1e-6


def mixture_parameters(raw: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(B, K, 5) -> means (B, K, 2), standard deviations (B, K, 2) via softplus plus ``MIN_STD``, log weights
    (B, K)."""
    return raw[..., :2], F.softplus(raw[..., 2:4]) + MIN_STD, F.log_softmax(raw[..., 4], dim=-1)


class SwarmMeanPool(nn.Module):
    """SWARM layer 2 -> K*5 on the points, then the mean of the outputs over the real points.

    With ``pooling="mean"`` inside the cell (default) the prediction is permutation-invariant; with
    ``"causal"`` it is what the authors' code ran (their layer's default), which depends on the order.
    The input-projection and output biases start at zero, as in the authors' code.
    """

    def __init__(self, dim_hidden: int, n_iter: int, pooling: str = "mean", n_clusters: int = N_CLUSTERS):
        super().__init__()
        self.n_clusters = n_clusters
        self.swarm = SwarmLayer(2, dim_hidden, n_clusters * PARAMS_PER_CLUSTER, n_iter, pooling=pooling)
        nn.init.zeros_(self.swarm.cell.input.bias)
        nn.init.zeros_(self.swarm.output.bias)
        self.symmetry = "invariant" if pooling == "mean" else "order-dependent"

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        h, c = self.swarm.states(x, mask)
        # The mixture is read off these outputs: under bf16 autocast (`train --step amp`) the output map and the
        # mean over the points run in the weights' dtype (float32), so neither the parameters nor the mean's 1/n
        # weights are rounded to bf16's 8 bits (up to 0.4 %: a mean at 3 moved by 0.012); the iterations keep
        # their bf16 products. A model cast to bf16 as a whole stays in bf16.
        with torch.autocast(x.device.type, enabled=False):
            hc = torch.cat([h, c], dim=-1)
            y = masked_mean(self.swarm.output(hc.to(self.swarm.output.weight.dtype)), mask)  # (B, K*5)
        return y.view(-1, self.n_clusters, PARAMS_PER_CLUSTER)


class SwarmPMA(nn.Module):
    """SWARM layer 2 -> 128, then PMA with K seeds, one SAB, and one Linear(K*128 -> K*5) on the
    flattened seeds (the paper, sec. 4.2; MABs with a single linear rFF and no activation)."""

    def __init__(self, dim_hidden: int, n_iter: int, pooling: str = "mean", n_clusters: int = N_CLUSTERS,
                 dim_set: int = 128, n_heads: int = 4):
        super().__init__()
        self.n_clusters = n_clusters
        self.swarm = SwarmLayer(2, dim_hidden, dim_set, n_iter, pooling=pooling)
        nn.init.zeros_(self.swarm.cell.input.bias)
        nn.init.zeros_(self.swarm.output.bias)
        self.pma = PMA(dim_set, n_clusters, n_heads, ff_layers=1, ff_activation=False)
        self.sab = SAB(dim_set, n_heads, ff_layers=1, ff_activation=False)
        self.head = nn.Linear(n_clusters * dim_set, n_clusters * PARAMS_PER_CLUSTER)
        self.symmetry = "invariant" if pooling == "mean" else "order-dependent"

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        z = self.sab(self.pma(self.swarm(x, mask), mask))  # (B, K, 128)
        return self.head(z.flatten(1)).view(-1, self.n_clusters, PARAMS_PER_CLUSTER)


class SetTransformerMog(nn.Module):
    """Set Transformer baseline: Linear(2 -> d), ISAB x L (m inducing points), PMA with K seeds, two SABs,
    and a per-seed Linear(d -> 5) — the encoder/decoder of Lee et al. (2019), built from swarmctl's
    post-LayerNorm blocks with per-head scaling and a 4-layer ReLU rFF in the encoder."""

    symmetry = "invariant"

    def __init__(self, dim_hidden: int, n_inducing: int, n_layers: int, n_heads: int, n_clusters: int = N_CLUSTERS):
        super().__init__()
        self.embed = nn.Linear(2, dim_hidden)
        self.encoder = nn.ModuleList(ISAB(dim_hidden, n_inducing, n_heads) for _ in range(n_layers))
        self.pma = PMA(dim_hidden, n_clusters, n_heads, ff_layers=1, ff_activation=True)
        self.decoder = nn.ModuleList(SAB(dim_hidden, n_heads, ff_layers=1) for _ in range(2))
        self.head = nn.Linear(dim_hidden, PARAMS_PER_CLUSTER)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_set_input(x, mask, self.embed.in_features, "SetTransformerMog")
        h = self.embed(zero_padded(x, mask))  # padding's NaN would reach the embedding's gradient
        for block in self.encoder:
            h = block(h, mask)
        z = self.pma(h, mask)
        for block in self.decoder:
            z = block(z)
        return self.head(z)  # (B, K, 5)


@register_model("swarm-mog", code=("dim_hidden", "n_iter", "n_layers"), task="mog",
                defaults={"dim_hidden": 768, "n_iter": 20, "n_layers": 1, "pooling": "mean"},
                summary="MoG parameters: SWARM + mean pooling")
def build_swarm_mog(cfg: ModelConfig) -> SwarmMeanPool:
    _single_layer(cfg)
    return SwarmMeanPool(cfg.dim_hidden, cfg.n_iter, cfg.pooling)


@register_model("swarm-mog-pma", code=("dim_hidden", "n_iter", "n_layers"), task="mog",
                defaults={"dim_hidden": 256, "n_iter": 10, "n_layers": 1, "pooling": "mean", "n_heads": 4},
                summary="MoG parameters: SWARM + PMA decoder")
def build_swarm_mog_pma(cfg: ModelConfig) -> SwarmPMA:
    _single_layer(cfg)
    return SwarmPMA(cfg.dim_hidden, cfg.n_iter, cfg.pooling, n_heads=cfg.n_heads)


@register_model("set-transformer-mog", code=("dim_hidden", "n_inducing", "n_layers"), task="mog",
                defaults={"dim_hidden": 128, "n_inducing": 32, "n_layers": 2, "n_heads": 4},
                summary="MoG parameters: ISAB encoder + PMA decoder")
def build_set_transformer_mog(cfg: ModelConfig) -> SetTransformerMog:
    check_heads_divide_hidden(cfg)
    return SetTransformerMog(cfg.dim_hidden, cfg.n_inducing, cfg.n_layers, cfg.n_heads)


def _single_layer(cfg: ModelConfig) -> None:
    if cfg.n_layers != 1:
        raise ConfigError(f"the MoG SWARM models have one SWARM layer; got layers {cfg.n_layers}")


__all__ = ["SetTransformerMog", "SwarmMeanPool", "SwarmPMA", "mixture_parameters"]

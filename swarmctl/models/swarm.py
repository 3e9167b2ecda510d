"""SWARM models for per-entity outputs: a stack of SWARM layers (arXiv:1906.09400, Sec. 3)."""

from __future__ import annotations

from torch import Tensor, nn

from swarmctl.config import ACTIVATIONS, ModelConfig
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.models.registry import register_model

_ACTIVATIONS = dict(zip(ACTIVATIONS, (nn.ReLU, nn.ELU, nn.LeakyReLU), strict=True))  # names: config.ACTIVATIONS


class SwarmNet(nn.Module):
    """``n_layers`` SWARM layers; layers 1..L-1 map to ``dim_hidden`` features followed by a
    non-linearity, the last maps to ``dim_out``. Each layer runs its own ``n_iter`` iterations.

    x (B, N, D_in), mask (B, N) bool (True = present) -> (B, N, D_out).
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        dim_hidden: int,
        n_iter: int,
        n_layers: int = 1,
        pooling: str = "mean",
        dropout: float = 0.0,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        widths = [dim_in] + [dim_hidden] * (n_layers - 1) + [dim_out]
        self.layers = nn.ModuleList(
            SwarmLayer(widths[k], dim_hidden, widths[k + 1], n_iter, pooling=pooling, dropout=dropout)
            for k in range(n_layers)
        )
        self.act = _ACTIVATIONS[activation]()
        self.symmetry = "equivariant" if pooling == "mean" else "causal"

    def compile_steps(self) -> None:
        """torch.compile the iteration body of every layer."""
        for layer in self.layers:
            layer.compile_step()

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = self.act(x)
            x = layer(x, mask)
        return x


@register_model(
    "swarm",
    code=("dim_hidden", "n_iter", "n_layers"),
    defaults={"dim_hidden": 192, "n_iter": 10, "n_layers": 1, "pooling": "mean"},
    summary="SWARM layers, mean pooling",
    extra_fields=("dropout",),
)
def build_swarm(cfg: ModelConfig) -> SwarmNet:
    return SwarmNet(
        cfg.dim_in,
        cfg.dim_out,
        dim_hidden=cfg.dim_hidden,
        n_iter=cfg.n_iter,
        n_layers=cfg.n_layers,
        pooling=cfg.pooling,
        dropout=cfg.dropout,
        activation=cfg.activation,
    )

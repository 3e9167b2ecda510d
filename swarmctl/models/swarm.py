"""SWARM models for per-entity outputs: a stack of SWARM layers (arXiv:1906.09400, Sec. 3)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from torch import Tensor, nn

from swarmctl.config import ModelConfig
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.models.registry import register_model
from swarmctl.models.stack import LayerStack


class SwarmNet(LayerStack):
    """``n_layers`` SWARM layers; layers 1..L-1 map to ``dim_hidden`` features followed by a
    ReLU, the last maps to ``dim_out``. Each layer runs its own ``n_iter`` iterations.

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
    ) -> None:
        widths = [dim_in] + [dim_hidden] * (n_layers - 1) + [dim_out]
        super().__init__(
            (SwarmLayer(widths[k], dim_hidden, widths[k + 1], n_iter, pooling=pooling, dropout=dropout)
             for k in range(n_layers)),
            nn.ReLU(),
        )
        self.symmetry = self.layers[0].symmetry  # "equivariant" (mean pooling) or "causal"

    def compile_steps(self) -> None:
        for layer in self.layers:
            layer.compile_step()

    def forward_chunked(self, x: Tensor, chunk_size: int, progress: Callable[[float], None] | None = None) -> Tensor:
        """:meth:`forward` of one large set ``x`` (N, D_in), all entities real, run ``chunk_size`` entities at
        a time (mean pooling only: see :meth:`SwarmLayer.forward_chunked`); ``progress(fraction_done)``
        after every chunk. Returns (N, D_out)."""
        total = len(self.layers) * self.layers[0].n_iter * -(-x.shape[0] // chunk_size)
        done = itertools.count(1)
        step = None if progress is None else lambda: progress(next(done) / total)
        return self.through_layers(x, lambda k, layer, u: layer.forward_chunked(u, chunk_size, step))


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
    )

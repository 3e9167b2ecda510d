"""Set-linear baselines (DeepSets-style) with mean or max pooling (arXiv:1906.09400, Sec. 4.1)."""

from __future__ import annotations

from torch import nn

from swarmctl.config import ModelConfig
from swarmctl.layers.set_linear import SetLinear
from swarmctl.models.registry import register_model
from swarmctl.models.stack import LayerStack


class SetLinearNet(LayerStack):
    """(n_layers - 1) x [SetLinear to dim_hidden, ReLU] + SetLinear to dim_out.

    x (B, N, D_in), mask (B, N) bool (True = present) -> (B, N, D_out).
    """

    symmetry = "equivariant"

    def __init__(self, dim_in: int, dim_out: int, dim_hidden: int, n_layers: int, pooling: str = "mean"):
        widths = [dim_in] + [dim_hidden] * (n_layers - 1) + [dim_out]
        super().__init__((SetLinear(widths[k], widths[k + 1], pooling) for k in range(n_layers)), nn.ReLU())


@register_model(
    "set-linear",
    code=("dim_hidden", "n_layers"),
    defaults={"dim_hidden": 64, "n_layers": 6, "pooling": "mean"},
    summary="set-linear, mean pooling",
)
@register_model(
    "set-linear-max",
    code=("dim_hidden", "n_layers"),
    defaults={"dim_hidden": 96, "n_layers": 6, "pooling": "max"},
    summary="set-linear, max pooling",
)
def build_set_linear(cfg: ModelConfig) -> SetLinearNet:
    """Both set-linear models: the pooling is the config's (mean or max by default)."""
    return SetLinearNet(cfg.dim_in, cfg.dim_out, cfg.dim_hidden, cfg.n_layers, pooling=cfg.pooling)

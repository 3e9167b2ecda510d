"""Set Transformer encoder baseline (Lee et al. 2019) in the SWARM authors' port: Linear -> ISAB x L
-> Linear, post-LayerNorm, 4-layer ReLU row-wise feed-forward (the paper, sec. 4.1.2, Models)."""

from __future__ import annotations

from torch import Tensor, nn

from swarmctl.config import ModelConfig
from swarmctl.layers.pooling import check_set_input, zero_padded
from swarmctl.layers.set_attention import ISAB
from swarmctl.models.registry import check_heads_divide_hidden, register_model


class SetTransformer(nn.Module):
    """x (B, N, D_in), mask (B, N) bool (True = present) -> (B, N, D_out).

    Attention logits are scaled per head by 1/sqrt(dim_hidden / n_heads) and padded keys are masked,
    as in the authors' port (the official module scales by the full width and has no mask).
    """

    symmetry = "equivariant"

    def __init__(self, dim_in: int, dim_out: int, dim_hidden: int, n_inducing: int, n_layers: int, n_heads: int):
        super().__init__()
        self.embed = nn.Linear(dim_in, dim_hidden)
        self.blocks = nn.ModuleList(ISAB(dim_hidden, n_inducing, n_heads) for _ in range(n_layers))
        self.head = nn.Linear(dim_hidden, dim_out)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_set_input(x, mask, self.embed.in_features, "SetTransformer")
        x = self.embed(zero_padded(x, mask))  # padding's NaN would reach the embedding's gradient
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


@register_model(
    "set-transformer",
    code=("dim_hidden", "n_inducing", "n_layers"),
    defaults={"dim_hidden": 32, "n_inducing": 60, "n_layers": 3, "n_heads": 4},
    summary="ISAB encoder, 4 heads",
)
def build_set_transformer(cfg: ModelConfig) -> SetTransformer:
    check_heads_divide_hidden(cfg)
    return SetTransformer(cfg.dim_in, cfg.dim_out, cfg.dim_hidden, cfg.n_inducing, cfg.n_layers, cfg.n_heads)

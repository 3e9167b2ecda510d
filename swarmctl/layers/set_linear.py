"""Set-linear (DeepSets-style) layer with masked mean or max pooling, as in the SWARM paper's
baselines (arXiv:1906.09400, Sec. 4.1.2; the authors' code form).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from swarmctl.layers.pooling import check_set_input, masked_max, masked_mean, zero_padded


class SetLinear(nn.Module):
    """y_i = A x_i + a + POOL_j (G x_j + g) over the real entities j (including i).

    Follows the authors' code (two affine maps, a mean or max over all real entities) rather than the
    paper's sum over j != i; the two differ by a re-parametrisation. For mean pooling the pooled term
    is computed as G mean(x) + g, which equals the mean of G x_j + g and costs one projection per set.

    Input (B, N, D_in), mask (B, N) bool (True = present); output (B, N, D_out). Padded entities have no
    influence on real outputs whatever they hold (zeroed at the entry); ``device``/``dtype`` are the usual
    factory keyword arguments.
    """

    def __init__(self, dim_in: int, dim_out: int, pooling: Literal["mean", "max"] = "mean", *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if pooling not in ("mean", "max"):
            raise ValueError(f"`pooling` must be mean or max, got {pooling!r}")
        self.pooling = pooling
        self.local = nn.Linear(dim_in, dim_out, device=device, dtype=dtype)  # A, a
        self.glob = nn.Linear(dim_in, dim_out, device=device, dtype=dtype)  # G, g

    def extra_repr(self) -> str:
        return f"dim_in={self.local.in_features}, dim_out={self.local.out_features}, pooling={self.pooling!r}"

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_set_input(x, mask, self.local.in_features, "SetLinear")
        x = zero_padded(x, mask)
        if self.pooling == "mean":
            pooled = self.glob(masked_mean(x, mask))  # (B, D_out)
        else:
            pooled = masked_max(self.glob(x), mask)  # (B, D_out)
        return self.local(x) + pooled.unsqueeze(1)

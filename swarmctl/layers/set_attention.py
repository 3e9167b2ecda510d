"""Masked multi-head attention blocks of the Set Transformer (Lee et al. 2019, arXiv:1810.00825):
MAB, SAB, ISAB and PMA, in the post-LayerNorm form the SWARM authors used as a baseline
(the paper, sec. 4.1.2, Models).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swarmctl.layers._fused import plain_ops_only
from swarmctl.layers.pooling import zero_padded


def _fused_attention(o: Tensor) -> bool:
    """Whether ``scaled_dot_product_attention`` may have run a fused kernel (flash, memory-efficient or cuDNN)
    for ``o``, whose backward has no derivative of its own; with only the math backend enabled it runs plain
    ops."""
    if plain_ops_only(o):
        return False  # the compiler and the transforms see the attention as one op: no Function in between
    b = torch.backends.cuda
    return b.flash_sdp_enabled() or b.mem_efficient_sdp_enabled() or b.cudnn_sdp_enabled()


class _FirstOrderAttention(torch.autograd.Function):
    """The identity on the attention's output, whose backward refuses a graph of the gradient
    (``create_graph=True``) in words a user can act on: PyTorch's fused attention kernels have first derivatives
    only, and would fail later naming an internal operator."""

    generate_vmap_rule = True  # inside a transform that does not trace ``o`` (see _fused_attention)

    @staticmethod
    def forward(o: Tensor) -> Tensor:
        return o.view_as(o)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        if torch.is_grad_enabled():  # in a backward, grad mode is on exactly under create_graph=True
            raise RuntimeError(
                "the Set Transformer's attention ran PyTorch's fused attention kernel, which has first derivatives "
                "only: for second derivatives (create_graph=True, gradgradcheck) run it under "
                "torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)")
        return grad


class MultiheadAttention(nn.Module):
    """Multi-head attention with per-head scaling 1/sqrt(d/h), Xavier-normal weights, zero biases.

    Padded keys are excluded from every softmax (a boolean mask to ``scaled_dot_product_attention``,
    which runs its fused kernel with it); padded queries produce zeros. The authors' port also zeroes
    Q, K and V at padded positions before and after their projections; here the padded rows of the keys'
    and values' input are zeroed once (a key's softmax weight of 0 times a NaN value would still be NaN),
    so what padding holds reaches no output.
    """

    def __init__(self, dim: int, n_heads: int, device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if dim % n_heads != 0:
            raise ValueError(f"`n_heads` ({n_heads}) must divide the width ({dim})")
        self.n_heads = n_heads
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim, device=device, dtype=dtype) for _ in range(4))
        for lin in (self.q, self.k, self.v, self.out):
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(
        self, q: Tensor, kv: Tensor, q_mask: Tensor | None = None, kv_mask: Tensor | None = None
    ) -> Tensor:
        """q (B, Nq, d), kv (B, Nk, d), masks (B, Nq) / (B, Nk) bool, True = present -> (B, Nq, d)."""
        B, Nq, d = q.shape
        h = self.n_heads
        kv = zero_padded(kv, kv_mask)  # a masked key's weight is 0, and 0 times a NaN value is NaN
        q = zero_padded(q, q_mask)  # a padded query's output is zeroed, but its NaN would reach the gradients
        q, k, v = (t.view(B, t.shape[1], h, d // h).transpose(1, 2) for t in (self.q(q), self.k(kv), self.v(kv)))
        attn_mask = None if kv_mask is None else kv_mask[:, None, None, :]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, h, Nq, d/h); scale 1/sqrt(d/h)
        if o.requires_grad and _fused_attention(o):
            o = _FirstOrderAttention.apply(o)
        o = o.transpose(1, 2).reshape(B, Nq, d)
        return zero_padded(self.out(o), q_mask)


def _row_ff(dim: int, n_layers: int, activation: bool, factory: dict[str, Any]) -> nn.Sequential:
    """Row-wise feed-forward: n_layers x [Linear(d, d) (+ ReLU)], Kaiming-normal weights, zero biases."""
    layers: list[nn.Module] = []
    for _ in range(n_layers):
        lin = nn.Linear(dim, dim, **factory)
        nn.init.kaiming_normal_(lin.weight)
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MAB(nn.Module):
    """Multihead Attention Block: Z = LN(Q + MHA(Q, K, K)); out = LN(Z + rFF(Z)).

    ``ff_layers`` Linear layers form rFF (4 with ReLU after each in the clustering baseline; one
    without activation in the mixture-parameter decoder). Output at padded queries is zero.
    """

    def __init__(self, dim: int, n_heads: int, ff_layers: int = 4, ff_activation: bool = True, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.attn = MultiheadAttention(dim, n_heads, **factory)
        self.norm1 = nn.LayerNorm(dim, **factory)
        self.ff = _row_ff(dim, ff_layers, ff_activation, factory)
        self.norm2 = nn.LayerNorm(dim, **factory)

    def forward(
        self, q: Tensor, kv: Tensor, q_mask: Tensor | None = None, kv_mask: Tensor | None = None
    ) -> Tensor:
        q = zero_padded(q, q_mask)  # the residual and the norm see a padded query too (its NaN: NaN gradients)
        z = self.norm1(q + self.attn(q, kv, q_mask, kv_mask))
        return zero_padded(self.norm2(z + self.ff(z)), q_mask)


class SAB(nn.Module):
    """Set Attention Block: MAB(X, X)."""

    def __init__(self, dim: int, n_heads: int, ff_layers: int = 4, ff_activation: bool = True, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.mab = MAB(dim, n_heads, ff_layers, ff_activation, device=device, dtype=dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.mab(x, x, mask, mask)


class ISAB(nn.Module):
    """Induced Set Attention Block: H = MAB(I, X); out = MAB(X, H), with m learned inducing points I
    (init N(0, 1)). Cost linear in the set size."""

    def __init__(self, dim: int, n_inducing: int, n_heads: int, ff_layers: int = 4, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.inducing = nn.Parameter(torch.randn(1, n_inducing, dim, device=device, dtype=dtype))
        self.mab_in = MAB(dim, n_heads, ff_layers, device=device, dtype=dtype)
        self.mab_out = MAB(dim, n_heads, ff_layers, device=device, dtype=dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        ind = self.inducing.to(x.dtype).expand(x.shape[0], -1, -1)  # (B, m, d)
        hidden = self.mab_in(ind, x, None, mask)
        return self.mab_out(x, hidden, mask, None)


class PMA(nn.Module):
    """Pooling by Multihead Attention: MAB(S, X) with k learned seed vectors S (init N(0, 1));
    (B, N, d) -> (B, k, d)."""

    def __init__(self, dim: int, n_seeds: int, n_heads: int, ff_layers: int = 1, ff_activation: bool = False,
                 device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(1, n_seeds, dim, device=device, dtype=dtype))
        self.mab = MAB(dim, n_heads, ff_layers, ff_activation, device=device, dtype=dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        seeds = self.seeds.to(x.dtype).expand(x.shape[0], -1, -1)
        return self.mab(seeds, x, None, mask)

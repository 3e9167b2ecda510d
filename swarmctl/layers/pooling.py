"""Pooling over the entity axis of (B, N, D) tensors: masked mean, masked max, causal mean.

Masks are bool (B, N) with True meaning the entity is present; ``None`` means all present.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_set_input(x: Tensor, mask: Tensor | None, dim_in: int, who: str, unbatched: bool = False) -> None:
    """Refuse, as cheaply as ``nn.Linear`` checks its input (shapes only, no data read), an input ``x`` that
    is not (B, N, dim_in) sets (or one (N, dim_in) set with ``unbatched``) and a ``mask`` that is not bool of
    x's leading shape; the ValueError names ``who``, the expected and the given shape."""
    ok = x.dim() == 3 or (unbatched and x.dim() == 2)
    if not ok or x.shape[-1] != dim_in:
        want = f"(B, N, {dim_in})" + (f" or one unbatched set (N, {dim_in})" if unbatched else "")
        raise ValueError(f"{who} expects input of shape {want}, got {tuple(x.shape)}")
    if mask is not None and (mask.dtype != torch.bool or mask.shape != x.shape[:-1]):
        raise ValueError(f"{who} expects a bool mask of shape {tuple(x.shape[:-1])} (True = present) for its "
                         f"input {tuple(x.shape)}, got a {str(mask.dtype).removeprefix('torch.')} mask of shape "
                         f"{tuple(mask.shape)}")


def zero_padded(x: Tensor, mask: Tensor | None) -> Tensor:
    """``x`` (B, N, D) with zeros at the padded entities, whatever they held: NaN and inf too, which a product
    with a zero weight or a zero gradient would keep (0 * NaN is NaN). ``mask`` None: ``x`` itself."""
    return x if mask is None else torch.where(mask.unsqueeze(-1), x, 0.0)


def mask_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Per-entity weights 1/n_real for real entities and 0 for padding, shape (B, N).

    Computing them once per forward lets every later masked mean be one batched matrix product.
    Returns None when there is no mask (plain mean).
    """
    if mask is None:
        return None
    w = mask.to(dtype)
    count = w.sum(dim=1, keepdim=True).clamp_min(1.0)
    return (w / count).contiguous()  # row-major whatever the mask's layout: the kernels read it so


def masked_mean(x: Tensor, mask: Tensor | None = None, weights: Tensor | None = None) -> Tensor:
    """Mean over real entities: (B, N, D) -> (B, D).

    ``weights`` (from :func:`mask_weights`) may be passed instead of ``mask`` to avoid recomputing them.
    A set with no real entity pools to zeros.
    """
    if weights is None:
        weights = mask_weights(mask, x.dtype)
    if weights is None:
        return x.mean(dim=1)
    return torch.bmm(weights.unsqueeze(1), x).squeeze(1)  # (B, 1, N) @ (B, N, D) -> (B, D)


def masked_max(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Max over real entities: (B, N, D) -> (B, D); padded entries count as -inf."""
    if mask is None:
        return x.amax(dim=1)
    fill = torch.finfo(x.dtype).min
    return x.masked_fill(~mask.unsqueeze(-1), fill).amax(dim=1)


def causal_mean(x: Tensor) -> Tensor:
    """Inclusive cumulative mean along the entity axis: out[:, t] = mean(x[:, :t+1]); (B, N, D) -> (B, N, D).

    Ignores masks (as in the authors' code): causal pooling is for ordered sequences such as images.
    """
    n = x.shape[1]
    steps = torch.arange(1, n + 1, device=x.device, dtype=x.dtype).view(1, n, 1)
    return x.cumsum(dim=1) / steps

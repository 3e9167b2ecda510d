"""SWARM Transformer: a class-conditional autoregressive image model from causal SWARM layers
(arXiv:1906.09400, Sec. 4.3), with a full-recompute and an incremental sampler."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from swarmctl.config import ModelConfig
from swarmctl.data.images import DATASETS, image_shape
from swarmctl.errors import ConfigError, either
from swarmctl.models.registry import register_model
from swarmctl.models.swarm import SwarmNet

DEFAULT_DATASET = "mnist"  # what an image model is built for when no dataset is named

N_VALUES = 256


def positional_features(dim: int, height: int, width: int) -> Tensor:
    """Fixed features (height, width, dim): for dim/4 log-spaced frequencies f from 1 to max(H, W)/2,
    [sin 2 pi f u, sin 2 pi f v, cos 2 pi f u, cos 2 pi f v] with u = col / W, v = row / W (the authors'
    code divides rows by the width too; equal for square images)."""
    freqs = torch.tensor(np.geomspace(1.0, 0.5 * max(height, width), dim // 4))
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    u = (cols / width).unsqueeze(-1) * freqs * 2 * math.pi  # (H, W, Q)
    v = (rows / width).unsqueeze(-1) * freqs * 2 * math.pi
    feats = torch.stack([u.sin(), v.sin(), u.cos(), v.cos()], dim=-1)  # (H, W, Q, 4): interleaved per frequency
    return feats.reshape(height, width, dim).float()


def scan_order(x: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, T) sub-pixels in scan order: row, column, then channel (fastest)."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)


class SwarmTransformer(nn.Module):
    """Class-conditional image model over sub-pixels in scan order t = (row * W + col) * C + channel.

    Input at position t: value embedding of sub-pixel t - 1 (zeros at t = 0) + fixed positional
    features of t's pixel + class embedding + (RGB) a learned channel embedding; then SWARM layers with
    causal (inclusive running-mean) pooling; 256 logits per sub-pixel. Embedding size = hidden size.

    forward(x (B, C, H, W) int values 0..255, y (B,) labels) -> logits (B, T, 256), T = C * H * W.
    """

    symmetry = "causal"

    def __init__(self, channels: int, height: int, width: int, dim_hidden: int, n_iter: int, n_layers: int = 1,
                 n_classes: int = 10) -> None:
        super().__init__()
        if dim_hidden % 4 != 0:
            raise ConfigError(f"hidden must be divisible by 4 for the positional features, got {dim_hidden}")
        self.shape = (channels, height, width)
        D = dim_hidden
        self.value_embed = nn.Embedding(N_VALUES, D)
        self.class_embed = nn.Embedding(n_classes, D)
        nn.init.uniform_(self.value_embed.weight, -0.1, 0.1)
        nn.init.uniform_(self.class_embed.weight, -0.1, 0.1)
        self.channel_embed = nn.Parameter(torch.zeros(channels, D)) if channels > 1 else None
        self.register_buffer("position", positional_features(D, height, width), persistent=False)
        self.net = SwarmNet(D, N_VALUES, D, n_iter, n_layers, pooling="causal")

    @property
    def n_positions(self) -> int:
        return math.prod(self.shape)

    def position_codes(self) -> Tensor:
        """Unshifted per-position codes (T, D): positional features (+ channel embedding)."""
        C, H, W = self.shape
        codes = self.position.unsqueeze(2).expand(H, W, C, -1)
        if self.channel_embed is not None:
            codes = codes + self.channel_embed
        return codes.reshape(C * H * W, -1)

    def from_sequence(self, seq: Tensor) -> Tensor:
        C, H, W = self.shape
        return seq.reshape(-1, H, W, C).permute(0, 3, 1, 2)

    def forward_embedded(self, values: Tensor, y: Tensor) -> Tensor:
        """Logits from the value embeddings (B, T, D) of every sub-pixel (before the shift)."""
        shifted = torch.cat([values.new_zeros(values.shape[0], 1, values.shape[2]), values[:, :-1]], dim=1)
        inputs = shifted + self.position_codes().to(values.dtype) + self.class_embed(y).unsqueeze(1)
        return self.net(inputs)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if x.dim() != 4 or tuple(x.shape[1:]) != self.shape or y.shape != x.shape[:1]:  # as cheap as nn.Linear's
            raise ValueError(f"SwarmTransformer expects images (B, {', '.join(map(str, self.shape))}) and labels (B,); "
                             f"got images {tuple(x.shape)} and labels {tuple(y.shape)}")
        return self.forward_embedded(self.value_embed(scan_order(x)), y)

    @torch.inference_mode()
    def sample(self, y: Tensor, temperature: float = 1.0, generator: torch.Generator | None = None,
               incremental: bool = True, progress: Callable[[int, int], None] | None = None) -> Tensor:
        """Draw images (B, C, H, W) uint8 for labels ``y`` (B,), one sub-pixel at a time in scan order.

        ``incremental`` computes one position per step from running sums (cost linear in the number of
        sub-pixels); otherwise every step runs a full forward pass over the canvas (the reference). Both
        use Gumbel-max sampling with the same noise, so equal logits give equal images. ``progress(done,
        total)`` is told after each sub-pixel position.
        """
        if not temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {temperature}")
        was_training = self.training
        self.eval()
        B, T = y.shape[0], self.n_positions
        device = y.device
        dtype = self.value_embed.weight.dtype
        seq = torch.zeros(B, T, dtype=torch.long, device=device)
        codes = self.position_codes()
        cls = self.class_embed(y)
        sums = [layer.causal_sums(B, device, dtype) for layer in self.net.layers]
        for t in range(T):
            if incremental:
                prev = self.value_embed(seq[:, t - 1]) if t > 0 else cls.new_zeros(B, cls.shape[1])
                logits = self.net.through_layers(prev + codes[t] + cls,
                                                 lambda k, layer, h, t=t: layer.causal_step(h, t, sums[k]))
            else:
                logits = self.forward(self.from_sequence(seq), y)[:, t]
            u = torch.rand(B, N_VALUES, generator=generator, device=device, dtype=torch.float64)
            gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
            seq[:, t] = (logits.double() / temperature + gumbel).argmax(dim=-1)
            if progress is not None:
                progress(t + 1, T)
        self.train(was_training)
        return self.from_sequence(seq).to(torch.uint8)


@register_model("swarm-image", code=("dim_hidden", "n_iter", "n_layers"), task="image",
                defaults={"dim_hidden": 256, "n_iter": 10, "n_layers": 1, "dataset": DEFAULT_DATASET},
                summary="SWARM Transformer, class-conditional images")
def build_swarm_image(cfg: ModelConfig) -> SwarmTransformer:
    if cfg.dataset not in DATASETS:
        raise ConfigError(f"`dataset` must be {either(DATASETS)}, got {cfg.dataset!r}")
    C, H, W = image_shape(cfg.dataset)
    return SwarmTransformer(C, H, W, cfg.dim_hidden, cfg.n_iter, cfg.n_layers)

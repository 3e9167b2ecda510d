"""Building blocks: SWARM cell and layer, pooling, set-linear and set-attention layers."""

from swarmctl.layers.pooling import causal_mean, mask_weights, masked_max, masked_mean
from swarmctl.layers.set_attention import ISAB, MAB, PMA, SAB
from swarmctl.layers.set_linear import SetLinear
from swarmctl.layers.swarm import SwarmCell, SwarmLayer

__all__ = [
    "ISAB",
    "MAB",
    "PMA",
    "SAB",
    "SetLinear",
    "SwarmCell",
    "SwarmLayer",
    "causal_mean",
    "mask_weights",
    "masked_max",
    "masked_mean",
]

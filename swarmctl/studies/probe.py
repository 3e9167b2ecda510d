"""The probe: an approximation of x*'s output when it joins a set, for SWARM models with mean pooling, at
the cost of one entity per location instead of a whole set of N + 1.

Definition (per layer, iteration k = 1..T-1 of the cell): the N entities of the set run on their own,
without x*, and m_k is the mean of their hidden states after iteration k. x* runs alone through the same
iterations with the population input

    p*_k = (N * m_k + h*_k) / (N + 1),

which is exactly the pooled mean of the N + 1 entities except that x*'s own influence on the others'
states (O(1/N)) is ignored. A multi-layer model propagates this through every layer: layer l + 1 sees the
set's layer-l outputs (computed without x*) and x*'s probed layer-l output.

The exact computation (the paper's definition) is :func:`swarmctl.studies.entropy.compute_entropy_map`
with ``method="exact"``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from swarmctl.errors import ConfigError
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.models.stack import LayerStack

METHODS = ("probe", "exact")
# exact stays the default for every model: on the GPU-trained SWARM (192-10-1, val loss 0.4153) the probe's
# entropy was up to 1.0 nats (N 100) and 0.48 nats (N 499) from exact (benchmarks/RESULTS.md), beyond the
# 0.05 nats that would make it a drop-in; the trained dynamics amplify x*'s O(1/N) influence on the others.
DEFAULT_METHOD = "exact"


def probe_supported(model: nn.Module) -> bool:
    """True for a stack of SWARM layers with mean pooling (a :class:`LayerStack`)."""
    return (
        isinstance(model, LayerStack)
        and len(model.layers) > 0
        and all(isinstance(layer, SwarmLayer) and layer.pooling == "mean" for layer in model.layers)
    )


def _set_trajectory(layer: SwarmLayer, u: Tensor) -> tuple[Tensor, Tensor]:
    """The set alone through one layer: its outputs (N, D_out) and the pooled means (T - 1, H) of its hidden
    states after iterations 1..T-1 (the population inputs of iterations 2..T)."""
    cell = layer.cell
    x_proj = cell.project_input(u)  # (N, 4H)
    h, c = cell.step(None, None, None, x_proj)
    means = []
    for _ in range(layer.n_iter - 1):
        m = h.mean(0, keepdim=True)  # (1, H)
        means.append(m)
        h, c = cell.step(h, c, m, x_proj)
    means_t = torch.cat(means) if means else u.new_zeros(0, cell.dim_hidden)
    return layer.output(torch.cat([h, c], dim=-1)), means_t


def _probe_layer(layer: SwarmLayer, s: Tensor, means: Tensor, n: int) -> Tensor:
    """x* (M, D_in), each alone, through one layer with population input (n m_k + h*_k) / (n + 1)."""
    cell = layer.cell
    # Wh h* + Wp (h* + n m_k) / (n + 1) = (Wh + Wp / (n + 1)) h* + (n / (n + 1)) Wp m_k: the cell's step with
    # these two weights and m_k as the pooled state, one product with h* per iteration
    w_p = cell.population.weight
    folded = {"recurrent.weight": cell.recurrent.weight + w_p / (n + 1), "population.weight": w_p * (n / (n + 1))}
    x_proj = cell.project_input(s)  # (M, 4H)
    h, c = cell.step(None, None, None, x_proj)
    for k in range(layer.n_iter - 1):
        h, c = functional_call(cell, folded, (h, c, means[k : k + 1], x_proj))
    return layer.output(torch.cat([h, c], dim=-1))


@torch.no_grad()
def probe_outputs(
    model: nn.Module,
    x: Tensor,
    stars: Tensor,
    batch: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> Tensor:
    """Model outputs (M, D_out) of each x* in ``stars`` (M, D_in) when added to the set ``x`` (N, D_in),
    computed by the probe, ``batch`` locations at a time. The model must be a SWARM model with mean pooling
    and in eval mode (no dropout)."""
    if not probe_supported(model):
        raise ConfigError("the probe needs a SWARM model with mean pooling; use `method` exact")
    if model.training:
        raise ValueError("probe_outputs needs the model in eval mode (dropout off)")
    n = x.shape[0]
    set_means: list[Tensor] = []  # per layer

    def set_alone(k: int, layer: SwarmLayer, u: Tensor) -> Tensor:
        u, means = _set_trajectory(layer, u)
        set_means.append(means)
        return u

    # on the CPU, one intra-op thread: the probe's operations are small (a few MB each), and on a shared CPU its
    # OpenMP threads wait for each other (on the 2-core development machine under load, the README's map took
    # 2.5-4.5 s with one thread and 7-27 s with two: benchmarks/RESULTS.md)
    threads = torch.get_num_threads()
    if stars.device.type == "cpu":
        torch.set_num_threads(1)
    out = []
    try:
        model.through_layers(x, set_alone)
        for s0 in range(0, len(stars), batch):
            out.append(model.through_layers(stars[s0 : s0 + batch],
                                            lambda k, layer, s: _probe_layer(layer, s, set_means[k], n)))
            if progress is not None:
                progress(min(s0 + batch, len(stars)), len(stars))
    finally:
        torch.set_num_threads(threads)
    return torch.cat(out) if out else stars.new_zeros(0, model.layers[-1].output.out_features)

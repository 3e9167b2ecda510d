"""A stack of set layers with one activation between consecutive layers: the one place that runs it.

``SwarmNet`` and ``SetLinearNet`` are such stacks; the image model's incremental sampler and the
entropy probe run each layer their own way (one position at a time, the set without x*) through the
same :meth:`LayerStack.through_layers`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import Tensor, nn

# step(k, layer, x) -> the output of layer k for its input x (after the activation, for k > 0)
Step = Callable[[int, nn.Module, Tensor], Tensor]


class LayerStack(nn.Module):
    """``layers[0]``, then ``act`` and ``layers[k]`` for k = 1..L-1 (no activation after the last layer).

    x (B, N, D_in), mask (B, N) bool (True = present) -> (B, N, D_out), each layer called as
    ``layer(x, mask)``. State-dict keys: ``layers.<k>.*`` (the activation has no parameters).
    """

    def __init__(self, layers: Iterable[nn.Module], act: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.act = act

    def through_layers(self, x: Tensor, step: Step) -> Tensor:
        """``x`` through every layer, each applied by ``step(k, layer, x)``, with ``act`` in between."""
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = self.act(x)
            x = step(k, layer, x)
        return x

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.through_layers(x, lambda k, layer, u: layer(u, mask))

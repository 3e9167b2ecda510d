"""One optimisation step (forward, loss, backward, Adam), run eagerly or, on CUDA, replayed from a CUDA
graph captured once per batch shape.

A step of a small model (swarm-mog: 10 tasks of ~300 points, 20 iterations) is hundreds of small kernels;
launching them costs more than running them. A CUDA graph records the whole step once and replays it with
one launch. What a graph needs, and how this module gives it:

- fixed shapes: one graph per batch shape (the MoG sampler pads N to a few buckets), at most
  ``max_graphs`` of them; other shapes run eagerly;
- fixed memory: the batch is copied into the graph's own input tensors; gradients are zeroed in place
  (never set to None), so every graph and every eager step use the same gradient tensors; the graphs
  share one memory pool (a step's activations are dead once it ends; only each graph's loss stays);
- no host sync inside the step: Adam runs with ``capturable=True`` (its step count on the device) and the
  Hungarian matching is solved on the device (tasks/hungarian.py);
- values baked in at capture: the learning rate. A new learning rate (decay, backtracking) or a reloaded
  optimizer state (backtracking, resume) drops the graphs; they are captured again after a warm-up.

Graphs are used on CUDA only and only when asked for (``TrainConfig.cuda_graphs``); elsewhere the step is
the plain eager step, unchanged. Each new shape first runs ``WARMUP_STEPS`` eager steps on a side stream
(as PyTorch requires before a capture); they are real steps of the run, and so is the capturing step,
whose graph is replayed at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

WARMUP_STEPS = 2  # eager steps of a shape before its capture
MAX_GRAPHS = 12  # the MoG buckets (9) fit; beyond, steps run eagerly


def graphs_available(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def _tensors(batch: Any) -> dict[str, Tensor]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), Tensor)}


def _shape_key(batch: Any) -> tuple:
    return tuple((name, tuple(t.shape), t.dtype) for name, t in _tensors(batch).items())


@dataclasses.dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: Any  # the batch the graph reads: its tensors are filled before each replay
    loss: Tensor  # the mean loss the graph writes


class TrainStep:
    """``step(batch) -> mean loss`` (a device scalar, not read): one optimisation step of ``model``. With
    graphs the loss tensor belongs to the graph and is overwritten by a later step: use it (e.g. add it to
    a running sum) before the next step.

    ``graphs`` asks for CUDA graphs; it is ignored off CUDA (``self.graphs`` says what is used).
    Call :meth:`optimizer_changed` after loading a state dict into ``opt``.
    """

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[nn.Module, Any], Tensor],
                 device: torch.device, amp: bool = False, graphs: bool = False, max_graphs: int = MAX_GRAPHS) -> None:
        self.model, self.opt, self.loss_fn, self.device, self.amp = model, opt, loss_fn, device, amp
        self.graphs = graphs and graphs_available(device)
        self.max_graphs = max_graphs
        self._graphs: dict[tuple, _Graph] = {}
        self._pool: Any = None  # one memory pool for all graphs: only one step's activations live at a time
        self._seen: dict[tuple, int] = {}
        self._valid_for: tuple = ()
        self.optimizer_changed()

    def optimizer_changed(self) -> None:
        """The optimizer's state or learning rate was replaced: graphs captured before are dropped."""
        for group in self.opt.param_groups:  # a checkpoint's param groups carry the flag of the run that saved it
            group["capturable"] = self.graphs
        self._graphs.clear()
        self._pool = None
        self._seen.clear()
        self._valid_for = self._optimizer_key()

    def _optimizer_key(self) -> tuple:
        groups = tuple(float(g["lr"]) for g in self.opt.param_groups)
        states = tuple(id(v) for s in self.opt.state.values() for v in s.values() if isinstance(v, Tensor))
        return groups, states

    def __call__(self, batch: Any) -> Tensor:
        if not self.graphs:
            return self._eager(batch, set_to_none=True)
        if self._optimizer_key() != self._valid_for:
            self.optimizer_changed()
        key = _shape_key(batch)
        graph = self._graphs.get(key)
        if graph is None:
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] <= WARMUP_STEPS or len(self._graphs) >= self.max_graphs:
                return self._side_stream(lambda: self._eager(batch, set_to_none=False))
            graph = self._graphs[key] = self._capture(batch)
            self._valid_for = self._optimizer_key()  # the capture created Adam's state on a first step
        for name, t in _tensors(batch).items():
            getattr(graph.inputs, name).copy_(t, non_blocking=True)
        graph.graph.replay()
        return graph.loss

    def _eager(self, batch: Any, set_to_none: bool) -> Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp, cache_enabled=not self.graphs):
            loss = self.loss_fn(self.model, batch).mean()
        self.opt.zero_grad(set_to_none=set_to_none)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def _side_stream(self, fn: Callable[[], Tensor]) -> Tensor:
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            out = fn()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return out

    def _capture(self, batch: Any) -> _Graph:
        inputs = dataclasses.replace(batch, **{k: t.clone() for k, t in _tensors(batch).items()})
        torch.cuda.synchronize(self.device)  # once per shape: capture needs an idle stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            loss = self._eager(inputs, set_to_none=False)
        self._pool = graph.pool() if self._pool is None else self._pool
        graph.replay()  # the capture recorded the step without running it
        return _Graph(graph, inputs, loss)

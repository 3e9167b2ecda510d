"""One optimisation step (forward, loss, backward, Adam), run eagerly or, on CUDA, replayed from a CUDA
graph captured once per batch shape (docs/design.md, "One step, optionally one graph"). Every call is exactly
one optimisation step on its batch: an eager step (each new shape's first ``WARMUP_STEPS``), the capture of a
new graph (recorded, then replayed once), or a replay. :class:`HostGraphs` stands in for the CUDA backend on
any device, so the bookkeeping is testable without a card.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

WARMUP_STEPS = 2  # eager steps of a shape before its capture
MAX_GRAPHS = 12  # the MoG buckets (9) and the clustering buckets (10) fit; beyond, steps run eagerly

# PyTorch warns once per optimizer when a capturable Adam steps outside a capture; the warm-up steps before
# each capture (and the shapes beyond max_graphs) are such steps by design
_UNCAPTURED_ADAM = r".*capturable=True.*running without \w+ graph capture"


@contextlib.contextmanager
def uncaptured_adam_ok() -> Iterator[None]:
    """Silence PyTorch's warning that a capturable optimizer steps outside a graph capture (and only it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UNCAPTURED_ADAM, category=UserWarning)
        yield


def graphs_available(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def place_optimizer_state(opt: torch.optim.Optimizer, capturable: bool) -> None:
    """Set every group's ``capturable`` flag (a checkpoint keeps the saving run's) and move each state's step
    count (float32, as Adam keeps it) where that mode wants it: the parameters' device for graphs, else the
    host, where plain Adam reads it every step (why: docs/design.md, "One step, optionally one graph")."""
    for group in opt.param_groups:
        group["capturable"] = capturable
        for p in group["params"]:
            state = opt.state.get(p)
            step = state.get("step") if state else None
            if isinstance(step, Tensor):
                where = p.device if capturable else torch.device("cpu")
                if step.device != where:
                    state["step"] = step.to(device=where, dtype=torch.float32)


class CudaGraphs:
    """The CUDA graph backend: side streams, capture, replay."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def side_stream(self, fn: Callable[[], Tensor]) -> Tensor:
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            out = fn()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return out

    def capture(self, fn: Callable[[], Tensor], pool: Any) -> tuple[Any, Tensor, Any]:
        """Record ``fn`` (which computes nothing while recorded) into a new graph sharing ``pool``; returns
        (graph, the output tensor the graph writes, the pool)."""
        torch.cuda.synchronize(self.device)  # once per shape: capture needs an idle stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, out, graph.pool() if pool is None else pool


class HostGraphs:
    """A stand-in for :class:`CudaGraphs` on any device: capturing runs the step once and keeps it, a replay
    runs it again and writes its loss into the captured output, as a graph would. It differs from a real
    capture in one way, which :class:`TrainStep` accounts for through ``capture_runs``: its capture computes.
    """

    capture_runs = True

    def __init__(self) -> None:
        self.captures = self.replays = 0

    def side_stream(self, fn: Callable[[], Tensor]) -> Tensor:
        return fn()

    def capture(self, fn: Callable[[], Tensor], pool: Any) -> tuple[Any, Tensor, Any]:
        self.captures += 1
        out = fn()
        return _HostGraph(self, fn, out), out, pool


@dataclasses.dataclass
class _HostGraph:
    owner: HostGraphs
    fn: Callable[[], Tensor]
    out: Tensor

    def replay(self) -> None:
        self.owner.replays += 1
        self.out.copy_(self.fn())


def _tensors(batch: Any) -> dict[str, Tensor]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), Tensor)}


@dataclasses.dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph (or a stand-in)
    inputs: Any  # the batch the graph reads: its tensors are filled before each replay
    loss: Tensor  # the mean loss the graph writes


class TrainStep:
    """``step(batch) -> mean loss`` (a device scalar, not read): one optimisation step of ``model``. With
    graphs the loss tensor belongs to the graph and is overwritten by a later step: use it (e.g. add it to
    a running sum) before the next step.

    ``graphs`` asks for CUDA graphs, ignored off CUDA unless a ``backend`` is given (tests pass
    :class:`HostGraphs`). A reloaded optimizer state or a new learning rate is noticed by the next call.
    """

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[nn.Module, Any], Tensor],
                 device: torch.device, amp: bool = False, graphs: bool = False, max_graphs: int = MAX_GRAPHS,
                 backend: Any = None) -> None:
        self.model, self.opt, self.loss_fn, self.device, self.amp = model, opt, loss_fn, device, amp
        self.graphs = graphs and (backend is not None or graphs_available(device))
        self.backend = backend if backend is not None else CudaGraphs(device) if self.graphs else None
        self.capturable = self.graphs and graphs_available(device)  # capturable Adam: CUDA tensors only
        self.max_graphs = max_graphs
        self._graphs: dict[tuple, _Graph] = {}
        self._pool: Any = None  # one memory pool for all graphs: only one step's activations live at a time
        self._seen: dict[tuple, int] = {}
        self._valid_for: tuple = ()
        self.optimizer_changed()

    def optimizer_changed(self) -> None:
        """The optimizer's state or learning rate was replaced: its state is placed for the mode again and
        the graphs captured before are dropped."""
        place_optimizer_state(self.opt, self.capturable)
        self._graphs.clear()
        self._pool = None
        self._seen.clear()
        self._valid_for = self._optimizer_key()

    def _optimizer_key(self) -> tuple:
        groups = tuple(float(g["lr"]) for g in self.opt.param_groups)
        states = tuple(id(v) for s in self.opt.state.values() for v in s.values() if isinstance(v, Tensor))
        return groups, states

    def __call__(self, batch: Any) -> Tensor:
        if self._optimizer_key() != self._valid_for:  # a backtrack or resume loaded another state
            self.optimizer_changed()
        loss = self._step(batch)
        if not self._valid_for[1]:  # Adam creates its state at its first step (later steps update it in place):
            self._valid_for = self._optimizer_key()  # noted once, so the next call takes it for no reloaded state
        return loss

    def _step(self, batch: Any) -> Tensor:
        if not self.graphs:
            return self._eager(batch, set_to_none=True)
        key = tuple((name, tuple(t.shape), t.dtype) for name, t in _tensors(batch).items())
        graph = self._graphs.get(key)
        if graph is None:
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] <= WARMUP_STEPS or len(self._graphs) >= self.max_graphs:
                return self.backend.side_stream(lambda: self._eager(batch, set_to_none=False))
            graph = self._graphs[key] = self._capture(batch)
            return graph.loss  # the capture's step was this batch's step
        for name, t in _tensors(batch).items():
            getattr(graph.inputs, name).copy_(t, non_blocking=True)
        graph.graph.replay()
        return graph.loss

    def _eager(self, batch: Any, set_to_none: bool) -> Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp, cache_enabled=not self.graphs):
            loss = self.loss_fn(self.model, batch).mean()
        self.opt.zero_grad(set_to_none=set_to_none)
        loss.backward()
        with uncaptured_adam_ok():
            self.opt.step()
        return loss.detach()

    def _capture(self, batch: Any) -> _Graph:
        """A graph of one step on a copy of ``batch``, and that step done once (by replaying the graph once,
        since recording computes nothing; a backend whose capture computes has done it already)."""
        inputs = dataclasses.replace(batch, **{k: t.clone() for k, t in _tensors(batch).items()})
        graph, loss, self._pool = self.backend.capture(lambda: self._eager(inputs, set_to_none=False), self._pool)
        if not getattr(self.backend, "capture_runs", False):
            graph.replay()
        return _Graph(graph, inputs, loss)

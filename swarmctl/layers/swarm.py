"""SWARM cell and SWARM layer (Vollgraf, "Learning Set-equivariant Functions with SWARM Mappings",
arXiv:1906.09400, Sec. 3). :meth:`SwarmCell.step` defines one iteration; the layer runs its iterations
through the fused CPU kernels (``_fused.py``), the Triton cell (``_triton.py``) or the step's PyTorch code,
which agree to float rounding (docs/design.md, "The fused CPU kernels").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swarmctl.errors import either
from swarmctl.layers import _fused
from swarmctl.layers._fused import lstm_pointwise
from swarmctl.layers.pooling import causal_mean, check_set_input, mask_weights, masked_mean, zero_padded

Pooling = Literal["mean", "causal"]
POOLINGS: tuple[str, ...] = ("mean", "causal")

_triton_cell = False  # the switch of triton_cell(): off until a GPU job has measured the Triton cell


@contextlib.contextmanager
def triton_cell(enabled: bool = True) -> Iterator[None]:
    """Inside, every :class:`SwarmLayer` whose input is on CUDA (on the CPU too under ``TRITON_INTERPRET=1``)
    runs its iterations through the Triton cell, except one compiled by ``compile_step`` or training with
    dropout; the setting found is restored on the way out. Raises ImportError where Triton cannot be imported."""
    global _triton_cell
    if enabled:
        from swarmctl.layers import _triton  # noqa: F401  (fails here, not inside a forward, without Triton)
    before, _triton_cell = _triton_cell, enabled
    try:
        yield
    finally:
        _triton_cell = before


def triton_cell_enabled() -> bool:
    return _triton_cell


class SwarmCell(nn.Module):
    """SWARM cell: an LSTM cell whose gates also see a pooled state of the whole population.

    Gate pre-activation of entity i (the paper, sec. 3, SWARM Mappings)::

        a_i = (Wx x_i + b) + Wh h_i + Wp p_i,   p_i = POOL(h_1, ..., h_N)_i

    Only the input projection has a bias. ``mean`` pooling is the masked mean over all real
    entities including i (so ``Wp p`` is one vector per set); ``causal`` pooling is the inclusive
    cumulative mean along the entity axis and ignores the mask. :meth:`step` is the one definition of
    the iteration: the layer's forward passes, its chunked and causal incremental forms and the entropy
    probe all run it.
    """

    def __init__(self, dim_in: int, dim_hidden: int, pooling: Pooling = "mean", *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be {either(POOLINGS)}, got {pooling!r}")
        self.dim_hidden = dim_hidden
        self.pooling = pooling
        factory = {"device": device, "dtype": dtype}
        self.input = nn.Linear(dim_in, 4 * dim_hidden, **factory)  # Wx, b
        self.recurrent = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False, **factory)  # Wh
        self.population = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False, **factory)  # Wp

    def extra_repr(self) -> str:
        return f"dim_in={self.input.in_features}, dim_hidden={self.dim_hidden}, pooling={self.pooling!r}"

    def project_input(self, x: Tensor) -> Tensor:
        """Wx x + b, (..., D_in) -> (..., 4H); constant across iterations, so computed once."""
        return self.input(x)

    def step(
        self, h: Tensor | None, c: Tensor | None, pooled: Tensor | None, x_proj: Tensor | None = None, *,
        x: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One iteration for every entity: a = (Wx x + b) + Wh h + Wp pooled, then the LSTM update
        c' = f c + i g, h' = o tanh(c'), with (i, f, o, g) = (sigmoid, sigmoid, sigmoid, tanh) of the
        gate blocks of a in that order.

        Args:
            h, c: the previous states (..., N, H), or None for the zero state of the first iteration
                (where a = Wx x + b).
            pooled: what the pooling made of the previous h: (..., N, H), one per entity, or (..., 1, H),
                one per set (Wp is then applied once per set). None with ``h``.
            x_proj: the input projection Wx x + b (..., N, 4H) from :meth:`project_input` (the same in
                every iteration, so callers compute it once), or
            x: the input (..., N, D_in) itself, projected here (on the CPU the kernels project a narrow
                input on the fly, without materialising the (N, 4H) projection).
        Returns:
            (h', c'), each (..., N, H).

        On the CPU without gradients this runs the fused C++ kernels; with gradients the LSTM update is one
        autograd Function with a hand-written backward (differentiable again with ``create_graph=True``); under
        ``torch.compile`` and transforms that trace its tensors it is plain PyTorch ops (:func:`lstm_pointwise`),
        for the compiler to fuse and the transforms to see through. All three are equal to float rounding.
        """
        if (x_proj is None) == (x is None):
            raise ValueError("give the input projection x_proj or the input x, not both")
        inp = x_proj if x is None else x
        width, what = (self.input.in_features, "an input x") if x_proj is None else (4 * self.dim_hidden,
                                                                                   "an input projection x_proj")
        if inp.shape[-1] != width:  # the kernels would read the input with the width it has
            raise ValueError(f"SwarmCell expects {what} of shape (..., {width}), got {tuple(inp.shape)}")
        params = tuple(self.parameters())
        kernels = _fused.usable_kernels(inp, self.recurrent.weight, h, c, pooled, *params)
        if kernels is not None and not _needs_grad(inp, h, c, pooled, *params):
            R, H = inp.shape[:-1].numel(), self.dim_hidden
            terms = _fused.input_terms(x_proj, x, self.input.weight, self.input.bias, R)
            if h is not None:
                h, c = h.reshape(R, H), c.reshape(R, H).contiguous()
                # one pooled h per set (..., 1, H) or per entity (..., N, H), each set's own even where it is
                # shared (broadcast), as the kernels read them
                if pooled.dim() < 2 or pooled.shape[-2] not in (1, inp.shape[-2]):
                    raise ValueError(f"SwarmCell expects a pooled h of shape (..., 1, {H}) or (..., {inp.shape[-2]}, "
                                     f"{H}) for its input {tuple(inp.shape)}, got {tuple(pooled.shape)}")
                pooled = pooled.expand(*inp.shape[:-2], pooled.shape[-2], H).reshape(-1, H)
            h_out, c_out = inp.new_empty(R, H), inp.new_empty(R, H)
            _fused.kernel_step_rows(kernels, h, c, pooled, self.recurrent.weight, self.population.weight, terms,
                                    h_out, c_out)
            return h_out.view(*inp.shape[:-1], H), c_out.view(*inp.shape[:-1], H)
        if x_proj is None:
            x_proj = self.project_input(x)
        if h is None:
            return lstm_pointwise(x_proj, None)
        H, G = self.dim_hidden, 4 * self.dim_hidden
        a = torch.addmm(x_proj.reshape(-1, G), h.reshape(-1, H), self.recurrent.weight.t()).view(x_proj.shape)
        p = F.linear(pooled, self.population.weight)  # (..., 1, 4H) for a pooled h per set
        if _fused.plain_ops_only(a, p, c):
            return lstm_pointwise(a + p, c)  # let the compiler fuse the plain ops, the transforms see them
        return _fused.fused_lstm_pointwise(a, p, c)

    forward = step  # so that ``torch.func.functional_call`` runs a step with other weights


class _FirstOrderOnly(torch.autograd.Function):
    """The identity, whose backward refuses a graph of the gradient (``create_graph=True``): the compiled step's
    backward (PyTorch's AOT autograd) has none, and would fail later in words about in-place operations."""

    @staticmethod
    def forward(h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        return h.view_as(h), c.view_as(c)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, gh: Tensor, gc: Tensor) -> tuple[Tensor, Tensor]:
        if torch.is_grad_enabled():  # in a backward, grad mode is on exactly under create_graph=True
            raise RuntimeError("SwarmLayer.compile_step() gives first derivatives only: for second derivatives "
                               "(create_graph=True, gradient penalties, Hessian-vector products) use the layer "
                               "without compile_step()")
        return gh, gc


def _needs_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class SwarmLayer(nn.Module):
    """SWARM layer: ``n_iter`` iterations of a :class:`SwarmCell` from zero state, then one linear map
    of the concatenated final states [h; c] (size 2H) to ``dim_out`` features per entity.

    Input (B, N, D_in), or one unbatched set (N, D_in) as ``nn.LSTM`` takes it; mask (B, N) bool (or (N,)
    unbatched) with True = present; output (B, N, D_out) (or (N, D_out)). Permutation-equivariant with
    ``pooling="mean"``; causal with ``pooling="causal"``. Dropout, when enabled, zeroes whole hidden units of
    a set after every iteration with a fresh mask, as in the authors' code.

    Masked entities have no influence on the real entities' outputs whatever they hold (NaN and inf
    included): their inputs are replaced by zeros at the entry, and mean pooling leaves them out. Causal
    pooling counts positions, not real entities (as in the authors' code), so with it padding belongs at
    the end of a sequence, where no real entity sees it. A wrong input width or mask shape raises
    ValueError naming the expected and the given shape. ``device``/``dtype`` are the usual factory keyword
    arguments. Second derivatives (``create_graph=True``) are exact on every path but the Triton cell and
    the compiled step, which refuse them; ``torch.func`` transforms and forward-mode AD run the plain PyTorch
    ops. ``torch.jit.trace`` is refused (the path taken depends on the input's device, dtype and gradients):
    use ``torch.export`` or ``torch.compile``.
    """

    def __init__(
        self,
        dim_in: int,
        dim_hidden: int,
        dim_out: int,
        n_iter: int,
        pooling: Pooling = "mean",
        dropout: float = 0.0,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if n_iter < 1:
            raise ValueError(f"`n_iter` must be >= 1, got {n_iter}")
        self.n_iter = n_iter
        self.dropout = dropout
        self.cell = SwarmCell(dim_in, dim_hidden, pooling, device=device, dtype=dtype)
        self.output = nn.Linear(2 * dim_hidden, dim_out, device=device, dtype=dtype)
        self._compiled_step = None

    @property
    def dim_in(self) -> int:
        return self.cell.input.in_features

    @property
    def dim_out(self) -> int:
        return self.output.out_features

    def extra_repr(self) -> str:
        return (f"dim_in={self.dim_in}, dim_hidden={self.cell.dim_hidden}, dim_out={self.dim_out}, "
                f"n_iter={self.n_iter}, pooling={self.pooling!r}, dropout={self.dropout}")

    @property
    def pooling(self) -> str:
        return self.cell.pooling

    @property
    def symmetry(self) -> str:
        """``"equivariant"`` with mean pooling, ``"causal"`` with causal pooling (the models' vocabulary)."""
        return "equivariant" if self.cell.pooling == "mean" else "causal"

    def compile_step(self) -> None:
        """Compile the iteration body (pooling and step) with ``torch.compile`` (kept out of the state dict)."""
        self.__dict__["_compiled_step"] = torch.compile(self._iteration, dynamic=None)

    def _iteration(self, x_proj: Tensor, h: Tensor, c: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor]:
        """Iterations 2..T: pool the previous h (one mean per set, or the causal mean per entity), then step."""
        pooled = masked_mean(h, weights=weights).unsqueeze(1) if self.cell.pooling == "mean" else causal_mean(h)
        return self.cell.step(h, c, pooled, x_proj)

    def _drop(self, h: Tensor) -> Tensor:
        if not (self.training and self.dropout > 0):
            return h
        keep = F.dropout(h.new_ones(h.shape[0], 1, h.shape[2]), self.dropout, True)  # (B, 1, H)
        return h * keep

    def states(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Final (h, c) after ``n_iter`` iterations, each (B, N, H), of sets ``x`` (B, N, D_in) (checked)."""
        check_set_input(x, mask, self.dim_in, "SwarmLayer")
        x = zero_padded(x, mask)  # what padding holds (NaN, inf) must reach nothing, and 0 * NaN is NaN
        cell = self.cell
        weights = mask_weights(mask, x.dtype) if cell.pooling == "mean" else None
        fused = (self._compiled_step is None and not (self.training and self.dropout > 0)
                 and not _fused.plain_ops_only(x, weights, *cell.parameters()))  # else the step's code
        if fused and _triton_cell:
            from swarmctl.layers import _triton

            if _triton.usable(x):
                return _triton.swarm_states(cell.project_input(x), cell.recurrent.weight, cell.population.weight,
                                            weights, self.n_iter, cell.pooling)
        kernels = _fused.usable_kernels(x, cell.recurrent.weight) if fused else None
        if kernels is not None:
            if x.shape[-1] <= _fused.FUSED_INPUT_MAX:  # the kernels add Wx x + b themselves
                inp, w_in, b_in = x, cell.input.weight, cell.input.bias
            else:
                inp, w_in, b_in = cell.project_input(x), None, None
            args = (inp, w_in, b_in, cell.recurrent.weight, cell.population.weight, weights, self.n_iter, cell.pooling)
            if _needs_grad(*args[:5]):
                return _fused.FusedIterations.apply(*args, kernels)[:2]
            return _fused.iterate(kernels, *args, keep=False)[:2]
        x_proj = cell.project_input(x)  # (B, N, 4H), reused by every iteration
        h, c = cell.step(None, None, None, x_proj)
        h = self._drop(h)
        iteration = self._compiled_step or self._iteration
        for _ in range(self.n_iter - 1):
            h, c = iteration(x_proj, h, c, weights)
            h = self._drop(h)
        if self._compiled_step is not None and h.requires_grad:  # its backward is not differentiable: say so
            h, c = _FirstOrderOnly.apply(h, c)
        return h, c

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if torch.jit.is_tracing():
            raise RuntimeError("SwarmLayer cannot be traced with torch.jit.trace: which code runs depends on the "
                               "input's device, dtype and gradients, and a trace would keep one; use torch.export "
                               "or torch.compile")
        check_set_input(x, mask, self.dim_in, "SwarmLayer", unbatched=True)
        if x.dim() == 2:  # one unbatched set, as nn.LSTM takes it
            return self.forward(x[None], None if mask is None else mask[None])[0]
        h, c = self.states(x, mask)
        return self.output(torch.cat([h, c], dim=-1))

    @torch.no_grad()
    def forward_chunked(self, x: Tensor, chunk_size: int, step: Callable[[], None] | None = None) -> Tensor:
        """:meth:`forward` of one set ``x`` (N, D_in), all entities real, ``chunk_size`` entities at a time.

        Mean pooling only. The pooled term of an iteration is the mean of the previous ``h`` over all N
        entities, so each iteration first sums ``h`` chunk by chunk and then updates every chunk in place:
        besides the final states (N, H) each, memory holds one chunk's gates, whatever N is. Equal to
        ``forward(x[None])[0]`` to float rounding (eval mode). ``step()`` is called after every chunk of
        every iteration, ``n_iter * ceil(N / chunk_size)`` times in all. Returns (N, D_out).
        """
        if self.cell.pooling != "mean":
            raise ValueError("forward_chunked needs pooling='mean'")
        if x.dim() != 2 or x.shape[-1] != self.dim_in:
            raise ValueError(f"SwarmLayer.forward_chunked expects one set (N, {self.dim_in}), got {tuple(x.shape)}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        cell = self.cell
        N, H = x.shape[0], cell.dim_hidden
        h, c = x.new_empty(N, H), x.new_empty(N, H)  # the states of all entities, updated in place
        out = x.new_empty(N, self.output.out_features)
        h_sum = torch.zeros(H, dtype=torch.float64, device=x.device)
        for t in range(self.n_iter):
            pooled = None if t == 0 else (h_sum / N).to(x.dtype).view(1, H)  # one mean for the set
            h_sum = torch.zeros_like(h_sum)
            for start in range(0, N, chunk_size):
                rows = slice(start, min(start + chunk_size, N))
                prev = (None, None) if t == 0 else (h[rows], c[rows])
                h[rows], c[rows] = cell.step(*prev, pooled, x=x[rows])
                h_sum += h[rows].sum(dim=0)  # summed in float32 per chunk, accumulated in float64
                if t == self.n_iter - 1:
                    out[rows] = self.output(torch.cat([h[rows], c[rows]], dim=-1))
                if step is not None:
                    step()
        return out

    def causal_sums(self, batch: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """Zero running sums for :meth:`causal_step`: (n_iter - 1, B, H)."""
        return torch.zeros(self.n_iter - 1, batch, self.cell.dim_hidden, device=device, dtype=dtype)

    @torch.no_grad()
    def causal_step(self, u: Tensor, t: int, sums: Tensor) -> Tensor:
        """Output at position ``t`` of a causal layer from its input ``u`` (B, D_in) alone.

        With causal pooling the states of positions < t never change once computed, so they enter only
        through ``sums[k]`` = sum over positions < t of h after iteration k + 1, which this call updates in
        place. Equal to ``forward`` at position t (eval mode); cost independent of t.
        """
        if self.cell.pooling != "causal":
            raise ValueError("causal_step needs pooling='causal'")
        cell = self.cell
        x_proj = cell.project_input(u)  # (B, 4H)
        h, c = cell.step(None, None, None, x_proj)
        for k in range(self.n_iter - 1):
            pooled = torch.add(sums[k], h).mul_(1.0 / (t + 1))  # inclusive running mean of the previous h
            sums[k] += h
            h, c = cell.step(h, c, pooled, x_proj)
        return self.output(torch.cat([h, c], dim=-1))

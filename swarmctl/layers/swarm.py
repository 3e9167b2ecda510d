"""SWARM cell and SWARM layer (Vollgraf, "Learning Set-equivariant Functions with SWARM Mappings",
arXiv:1906.09400, Sec. 3). For mean pooling the pooled state is projected once per set (not once per
entity), and the input projection is computed once per forward pass.

On the CPU the layer runs its iterations through fused C++ kernels (``_swarm_kernels.cpp``, loaded by
``_ext.py``): one pass over the gate block per iteration forward and one backward, with a hand-written
backward over all iterations. Elsewhere (CUDA, half precision, dropout, ``torch.compile``, or no
compiler) it runs the PyTorch code below; both give the same results to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swarmctl.layers import _ext
from swarmctl.layers.pooling import causal_mean, mask_weights, masked_mean

Pooling = Literal["mean", "causal"]
POOLINGS: tuple[str, ...] = ("mean", "causal")


def lstm_pointwise(a: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor]:
    """LSTM gate non-linearities and state update, written with plain autograd ops (the reference).

    Args:
        a: gate pre-activations (..., 4H) in the block order (in, f, o, g).
        c: previous cell state (..., H), or None for the zero state.
    Returns:
        (h, c), each (..., H).
    """
    H = a.shape[-1] // 4
    sig = torch.sigmoid(a[..., : 3 * H])  # in, f, o in one call
    g = torch.tanh(a[..., 3 * H :])
    i, f, o = sig[..., :H], sig[..., H : 2 * H], sig[..., 2 * H :]
    c_new = i * g if c is None else torch.addcmul(f * c, i, g)
    return o * torch.tanh(c_new), c_new


class _FusedLSTMPointwise(torch.autograd.Function):
    """(a + p, c) -> (h, c') with a hand-written backward.

    Autograd of the reference slices the 4H gate block into four views, and each slice's backward
    materialises a zero-filled (B, N, 4H) tensor; here the gate gradient is written into one tensor,
    and only the activated gates, the previous cell state and tanh(c') are kept for backward.
    ``p`` broadcasts against ``a`` (one population term per set for mean pooling).
    """

    @staticmethod
    def forward(ctx, a: Tensor, p: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        H = a.shape[-1] // 4
        gates = a + p  # (B, N, 4H), activated in place below
        gates[..., : 3 * H].sigmoid_()
        gates[..., 3 * H :].tanh_()
        i, f, o, g = gates.split(H, dim=-1)
        c_new = i * g
        c_new.addcmul_(f, c)
        tc = torch.tanh(c_new)
        h = o * tc
        ctx.save_for_backward(gates, c, tc)
        ctx.p_shape = p.shape
        return h, c_new

    @staticmethod
    def backward(ctx, dh: Tensor | None, dc: Tensor | None) -> tuple[Tensor, Tensor | None, Tensor]:
        gates, c, tc = ctx.saved_tensors
        H = gates.shape[-1] // 4
        i, f, o, g = gates.split(H, dim=-1)
        da = torch.empty_like(gates)
        di, df, do, dg = da.split(H, dim=-1)
        if dh is None:  # only c' is used downstream
            dct = dc.clone() if dc is not None else torch.zeros_like(tc)
            do.zero_()
        else:
            # dc' = dc + dh * o * (1 - tanh(c')^2)
            dct = torch.mul(dh, o)
            dct.addcmul_(dct, tc.square(), value=-1)
            if dc is not None:
                dct.add_(dc)
            torch.mul(dh, tc, out=do)
        torch.mul(dct, g, out=di)
        torch.mul(dct, c, out=df)
        torch.mul(dct, i, out=dg)
        sig = gates[..., : 3 * H]
        dsig = da[..., : 3 * H].mul_(sig)
        dsig.addcmul_(dsig, sig, value=-1)  # sigmoid' = s (1 - s), without a (1 - s) temporary
        dg.addcmul_(dg.mul(g), g, value=-1)  # tanh' = 1 - g^2
        dp = da if ctx.p_shape == da.shape else da.sum_to_size(ctx.p_shape)
        return da, dp, dct.mul_(f)


class SwarmCell(nn.Module):
    """SWARM cell: an LSTM cell whose gates also see a pooled state of the whole population.

    Gate pre-activation of entity i (protocol sec. 1.1)::

        a_i = (Wx x_i + b) + Wh h_i + Wp p_i,   p_i = POOL(h_1, ..., h_N)_i

    Only the input projection has a bias. ``mean`` pooling is the masked mean over all real
    entities including i (so ``Wp p`` is one vector per set); ``causal`` pooling is the inclusive
    cumulative mean along the entity axis and ignores the mask.
    """

    def __init__(self, dim_in: int, dim_hidden: int, pooling: Pooling = "mean") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.dim_hidden = dim_hidden
        self.pooling = pooling
        self.input = nn.Linear(dim_in, 4 * dim_hidden)  # Wx, b
        self.recurrent = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False)  # Wh
        self.population = nn.Linear(dim_hidden, 4 * dim_hidden, bias=False)  # Wp

    def project_input(self, x: Tensor) -> Tensor:
        """Wx x + b, (B, N, D_in) -> (B, N, 4H); constant across iterations, so computed once."""
        return self.input(x)

    def forward(
        self, x_proj: Tensor, h: Tensor | None, c: Tensor | None, weights: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """One iteration for all entities.

        Args:
            x_proj: cached input projection (B, N, 4H).
            h, c: previous states (B, N, H), or None for the zero initial state (first iteration,
                where the recurrent and population terms vanish).
            weights: (B, N) pooling weights from :func:`mask_weights` (mean pooling), None = all real.
        Returns:
            (h, c), each (B, N, H).
        """
        if h is None:
            return lstm_pointwise(x_proj, None)
        B, N, H4 = x_proj.shape
        H = self.dim_hidden
        a = torch.addmm(x_proj.reshape(B * N, H4), h.reshape(B * N, H), self.recurrent.weight.t())
        a = a.view(B, N, H4)
        if self.pooling == "mean":
            p = F.linear(masked_mean(h, weights=weights), self.population.weight).unsqueeze(1)  # (B, 1, 4H)
        else:
            p = F.linear(causal_mean(h), self.population.weight)  # (B, N, 4H)
        if torch.compiler.is_compiling():
            return lstm_pointwise(a + p, c)  # let the compiler fuse the plain ops
        return _FusedLSTMPointwise.apply(a, p, c)


class SwarmLayer(nn.Module):
    """SWARM layer: ``n_iter`` iterations of a :class:`SwarmCell` from zero state, then one linear map
    of the concatenated final states [h; c] (size 2H) to ``dim_out`` features per entity.

    Input (B, N, D_in), mask (B, N) bool with True = present (used by mean pooling only); output
    (B, N, D_out). Permutation-equivariant with ``pooling="mean"``; causal with ``pooling="causal"``.

    Departure from the authors' code: the input projection cache is a local of ``forward`` rather than
    module state (identical results). Dropout, when enabled, zeroes whole hidden units of a set after
    every iteration with a fresh mask, as in the authors' code.
    """

    def __init__(
        self,
        dim_in: int,
        dim_hidden: int,
        dim_out: int,
        n_iter: int,
        pooling: Pooling = "mean",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if n_iter < 1:
            raise ValueError(f"n_iter must be >= 1, got {n_iter}")
        self.n_iter = n_iter
        self.dropout = dropout
        self.cell = SwarmCell(dim_in, dim_hidden, pooling)
        self.output = nn.Linear(2 * dim_hidden, dim_out)
        self._compiled_step = None

    @property
    def pooling(self) -> str:
        return self.cell.pooling

    @property
    def symmetry(self) -> str:
        """``"equivariant"`` with mean pooling, ``"causal"`` with causal pooling (the models' vocabulary)."""
        return "equivariant" if self.cell.pooling == "mean" else "causal"

    def compile_step(self) -> None:
        """Compile the iteration body with ``torch.compile`` (kept out of the state dict)."""
        self.__dict__["_compiled_step"] = torch.compile(self.cell.forward, dynamic=None)

    def _kernels(self, x: Tensor) -> _ext.Kernels | None:
        """The fused CPU kernels where they apply to this call, else None (the PyTorch path)."""
        if not _ext.Kernels.supports(x) or self._compiled_step is not None or x.shape[0] * x.shape[1] == 0:
            return None
        if (self.training and self.dropout > 0) or torch.compiler.is_compiling():
            return None
        if torch.is_autocast_enabled("cpu") or self.cell.recurrent.weight.dtype != x.dtype:
            return None
        return _ext.kernels()

    def _drop(self, h: Tensor) -> Tensor:
        if not (self.training and self.dropout > 0):
            return h
        keep = F.dropout(h.new_ones(h.shape[0], 1, h.shape[2]), self.dropout, True)  # (B, 1, H)
        return h * keep

    def states(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Final (h, c) after ``n_iter`` iterations, each (B, N, H)."""
        cell = self.cell
        weights = mask_weights(mask, x.shape[1], x.dtype) if cell.pooling == "mean" else None
        kernels = self._kernels(x)
        if kernels is not None:
            if x.shape[-1] <= FUSED_INPUT_MAX:  # the kernels add Wx x + b themselves
                inp, w_in, b_in = x, cell.input.weight, cell.input.bias
            else:
                inp, w_in, b_in = cell.project_input(x), None, None
            args = (inp, w_in, b_in, cell.recurrent.weight, cell.population.weight, weights, self.n_iter, cell.pooling)
            if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in args[:5]):
                return _FusedIterations.apply(*args, kernels)
            return _iterate(kernels, *args, keep=False)[:2]
        x_proj = cell.project_input(x)  # (B, N, 4H), reused by every iteration
        h, c = cell(x_proj, None, None)
        h = self._drop(h)
        step = self._compiled_step or self.cell
        for _ in range(self.n_iter - 1):
            h, c = step(x_proj, h, c, weights)
            h = self._drop(h)
        return h, c

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
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
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        cell = self.cell
        N, D = x.shape
        H = cell.dim_hidden
        h, c = x.new_empty(N, H), x.new_empty(N, H)  # the states of all entities, updated in place
        out = x.new_empty(N, self.output.out_features)
        kernels = self._kernels(x.unsqueeze(0))
        w_rec_t, w_pop = cell.recurrent.weight.t(), cell.population.weight
        if kernels is not None and D <= FUSED_INPUT_MAX:  # the kernels add Wx x + b themselves
            wx_t, bias = cell.input.weight.t().contiguous(), cell.input.bias.contiguous()
        gates = x.new_empty(min(chunk_size, N), 4 * H)
        h_sum = torch.zeros(H, dtype=torch.float64, device=x.device)
        for t in range(self.n_iter):
            p = None if t == 0 else F.linear((h_sum / N).to(x.dtype), w_pop)  # (4H,): one term for the set
            h_sum = torch.zeros_like(h_sum)
            for start in range(0, N, chunk_size):
                rows = slice(start, min(start + chunk_size, N))
                xs, hs, cs = x[rows], h[rows], c[rows]
                if kernels is not None:
                    g = gates[: len(xs)]
                    terms = {"x": xs.contiguous(), "wxT": wx_t, "bias": bias} if D <= FUSED_INPUT_MAX else \
                        {"b": cell.project_input(xs).contiguous()}
                    if t == 0:
                        kernels.forward(g, hs, cs, **terms)
                    else:
                        torch.mm(hs, w_rec_t, out=g)
                        kernels.forward(g, hs, cs, a=g, p=p.view(1, -1), rows_per_set=len(xs), c_prev=cs, **terms)
                elif t == 0:
                    hs[:], cs[:] = lstm_pointwise(cell.project_input(xs), None)
                else:
                    hs[:], cs[:] = lstm_pointwise(torch.addmm(cell.project_input(xs) + p, hs, w_rec_t), cs)
                h_sum += hs.sum(dim=0)  # summed in float32 per chunk, accumulated in float64
                if t == self.n_iter - 1:
                    out[rows] = self.output(torch.cat([hs, cs], dim=-1))
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
        w_h, w_p = cell.recurrent.weight.t(), cell.population.weight.t()
        scale = 1.0 / (t + 1)
        x_proj = cell.project_input(u)  # (B, 4H)
        h, c = lstm_pointwise(x_proj, None)
        hs = [h]
        for k in range(self.n_iter - 1):
            p = torch.add(sums[k], h).mul_(scale)  # inclusive running mean of the previous iteration's h
            h, c = lstm_pointwise(torch.addmm(x_proj, h, w_h).addmm_(p, w_p), c)
            hs.append(h)
        if hs[:-1]:
            sums += torch.stack(hs[:-1])
        return self.output(torch.cat([h, c], dim=-1))


FUSED_INPUT_MAX = 8  # input widths up to this get their projection inside the kernels (never materialised)


def _rows(t: Tensor | None, R: int, H: int) -> tuple[Tensor, int] | None:
    """(B, N, H) gradient as rows for the kernels: the tensor and its row stride (copied only if needed)."""
    if t is None:
        return None
    B, N, _ = t.shape
    if t.stride(2) == 1 and t.stride(0) == N * t.stride(1):
        return t, t.stride(1)
    return t.reshape(R, H).contiguous(), H


def _iterate(
    kernels: _ext.Kernels, inp: Tensor, w_in: Tensor | None, b_in: Tensor | None, w_rec: Tensor, w_pop: Tensor,
    weights: Tensor | None, n_iter: int, pooling: str, keep: bool
) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """All iterations of the layer with the fused kernels; with ``keep`` the tensors for the backward.

    ``inp`` is the input x (B, N, D) with its projection ``w_in``, ``b_in`` (D <= FUSED_INPUT_MAX: the
    kernels add Wx x + b on the fly), or the input projection (B, N, 4H) itself with ``w_in`` None.
    Kept: the activated gates (n_iter, R, 4H), h and c of every iteration (n_iter, R, H), and for mean
    pooling the pooled h of iterations 1..n_iter-1 (n_iter - 1, B, H). R = B * N rows.
    """
    B, N, _ = inp.shape
    G = w_rec.shape[0]
    H, R = G // 4, B * N
    w_rec_t, w_pop_t = w_rec.detach().t(), w_pop.detach().t()
    if w_in is None:
        terms = {"b": inp.detach().reshape(R, G).contiguous()}
    else:
        terms = {"x": inp.detach().reshape(R, -1).contiguous(), "wxT": w_in.detach().t().contiguous(),
                 "bias": None if b_in is None else b_in.detach().contiguous()}
    if weights is not None:
        weights = weights.contiguous()
    gates = inp.new_empty(n_iter if keep else 1, R, G)
    hs = inp.new_empty(n_iter if keep else 2, R, H)
    cs = inp.new_empty(n_iter if keep else 2, R, H)
    pooled = inp.new_empty(max(n_iter - 1, 0), B, H) if keep and pooling == "mean" else None
    kernels.forward(gates[0], hs[0], cs[0], **terms)
    for t in range(1, n_iter):
        g = gates[t if keep else 0]
        prev, cur = (t - 1, t) if keep else ((t - 1) % 2, t % 2)
        torch.mm(hs[prev], w_rec_t, out=g)
        h_prev = hs[prev].view(B, N, H)
        p = None
        if pooling == "mean":
            pool = masked_mean(h_prev, weights=weights)  # (B, H)
            if pooled is not None:
                pooled[t - 1] = pool
            p = pool @ w_pop_t  # (B, 4H): one population term per set
        else:
            g.addmm_(causal_mean(h_prev).view(R, H), w_pop_t)
        kernels.forward(g, hs[cur], cs[cur], a=g, p=p, rows_per_set=N, c_prev=cs[prev], **terms)
    last = n_iter - 1 if keep else (n_iter - 1) % 2
    saved = (gates, hs, cs) + ((pooled,) if pooled is not None else ())
    return hs[last].view(B, N, H), cs[last].view(B, N, H), saved


class _FusedIterations(torch.autograd.Function):
    """(x or x_proj, Wx, b, Wh, Wp) -> final (h, c) of all iterations, through the fused kernels.

    Backward, from the last iteration to the first: the kernel computes the gate gradient da_t from the
    kept gates (and, for mean pooling, sums it per set; for a narrow input, accumulates the input
    projection's gradients); da_t Wh (plus the pooling's backward) gives the gradient of h_{t-1}, and
    da_t h_{t-1} is added to the recurrent weight's gradient. The saved tensors are only read, so the
    backward may run more than once (retain_graph, gradcheck).
    """

    @staticmethod
    def forward(ctx, inp, w_in, b_in, w_rec, w_pop, weights, n_iter, pooling, kernels):
        h, c, saved = _iterate(kernels, inp, w_in, b_in, w_rec, w_pop, weights, n_iter, pooling, keep=True)
        ctx.kernels, ctx.pooling, ctx.n_rows = kernels, pooling, inp.shape[:2]
        ctx.save_for_backward(inp, w_in, w_rec, w_pop, weights, *saved)
        return h, c

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dh_out, dc_out):
        kernels, pooling = ctx.kernels, ctx.pooling
        inp, w_in, w_rec, w_pop, weights, gates, hs, cs, *rest = ctx.saved_tensors
        B, N = ctx.n_rows
        G = w_rec.shape[0]
        H, R, n_iter = G // 4, B * N, gates.shape[0]
        mean = pooling == "mean"
        narrow = w_in is not None
        need = ctx.needs_input_grad
        dh, dc = _rows(dh_out, R, H), _rows(dc_out, R, H)
        terms = {}
        d_inp = d_w_in = d_b_in = d_rec = d_pop = None
        if narrow:
            D = inp.shape[-1]
            terms = {"x": inp.reshape(R, D).contiguous(), "wxT": w_in.t().contiguous(),
                     "dwxT": gates.new_zeros(D, G), "db": gates.new_zeros(G),
                     "dx": gates.new_zeros(R, D) if need[0] else None}
        elif need[0]:
            d_inp = gates.new_zeros(R, G)
        if n_iter > 1:
            d_rec, d_pop = w_rec.new_zeros(G, H), w_pop.new_zeros(G, H)
        da = gates.new_empty(R, G)
        dp = gates.new_empty(B, G) if mean else None
        dc_bufs = (gates.new_empty(R, H), gates.new_empty(R, H)) if n_iter > 1 else ()
        dpool = None
        if not mean:
            steps = torch.arange(1, N + 1, dtype=gates.dtype).view(1, N, 1)
        for t in range(n_iter - 1, -1, -1):
            first = t == 0
            dc_prev = None if first else dc_bufs[t % 2]
            kernels.backward(gates[t], da, cs[t], c_prev=None if first else cs[t - 1], dh=dh, dc=dc, dpool=dpool,
                             weights=weights, rows_per_set=N, dc_prev=dc_prev, dp=None if first else dp, **terms)
            if d_inp is not None:
                d_inp += da
            if first:
                break
            h_prev = hs[t - 1]
            d_rec.addmm_(da.t(), h_prev)
            dh_t = da @ w_rec  # (R, H)
            if mean:
                d_pop.addmm_(dp.t(), rest[0][t - 1])  # rest[0][t - 1]: the pooled h this iteration saw
                dpool = dp @ w_pop  # (B, H): gradient of the pooled h, spread over rows by the kernel
            else:  # causal mean: out_j = cumsum(h)_j / (j + 1), so dh_i = sum_{j >= i} d_j / (j + 1)
                d_pop.addmm_(da.t(), causal_mean(h_prev.view(B, N, H)).view(R, H))
                s = (da @ w_pop).view(B, N, H).div_(steps)
                dh_t += s.flip(1).cumsum(1).flip(1).view(R, H)  # suffix sums: exact zeros stay zero (causality)
            dh, dc = (dh_t, H), (dc_prev, H)
        if narrow:
            d_inp = terms["dx"].view(inp.shape) if need[0] else None
            d_w_in, d_b_in = terms["dwxT"].t(), terms["db"]
        elif d_inp is not None:
            d_inp = d_inp.view(B, N, G)
        return (d_inp, d_w_in, d_b_in, d_rec if need[3] else None, d_pop if need[4] else None,
                None, None, None, None)

"""Fused implementations of the SWARM iteration that :meth:`swarmctl.layers.swarm.SwarmCell.step` defines:
an autograd Function for its LSTM non-linearities (any device), and on the CPU the C++ kernels
(``_swarm_kernels.cpp``, loaded by ``_ext.py``) for one iteration without gradients and for all iterations
of a layer with a hand-written backward. Tests hold each equal to the plain PyTorch ops.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad
import torch.nn.functional as F
from torch import Tensor

from swarmctl.layers import _ext
from swarmctl.layers.pooling import causal_mean, masked_mean

FUSED_INPUT_MAX = 8  # input widths up to this get their projection inside the kernels (never materialised)


def plain_ops_only(*tensors: Tensor | None) -> bool:
    """True under ``torch.compile``, and where one of ``tensors`` is traced by a ``torch.func`` transform (vmap,
    grad, jacrev, ...) or carries a forward-mode tangent (``torch.autograd.forward_ad``): there the SWARM
    iteration runs plain PyTorch ops only (:func:`lstm_pointwise`), which the compiler fuses and the transforms
    see through, instead of the autograd Functions and kernels of this module (the kernels would drop a dual
    tensor's tangent). The Functions run inside a transform on the tensors it does not trace."""
    return torch.compiler.is_compiling() or _traced(*tensors)


def _traced(*tensors: Tensor | None) -> bool:
    """Whether one of ``tensors`` is a ``torch.func`` transform's (a batched or gradient-tracking wrapper, which
    has no storage for the kernels and takes no ``out=`` op; so is a batched gradient, ``autograd.grad(...,
    is_grads_batched=True)``) or a dual tensor of forward-mode AD."""
    for t in tensors:
        if t is None:
            continue
        try:
            t.untyped_storage()
        except NotImplementedError:  # the transforms' wrappers refuse it
            return True
        if forward_ad.unpack_dual(t).tangent is not None:
            return True
    return False


def lstm_pointwise(a: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor]:
    """(h, c), each (..., H), of the LSTM update in plain PyTorch ops (what ``torch.compile`` fuses), from the
    gate pre-activations ``a`` (..., 4H) in the block order (in, f, o, g) and the cell state ``c`` (None: zero)."""
    H = a.shape[-1] // 4
    sig = torch.sigmoid(a[..., : 3 * H])  # in, f, o in one call
    g = torch.tanh(a[..., 3 * H :])
    i, f, o = sig[..., :H], sig[..., H : 2 * H], sig[..., 2 * H :]
    c_new = i * g if c is None else torch.addcmul(f * c, i, g)
    return o * torch.tanh(c_new), c_new


def plain_iterations(inp: Tensor, w_in: Tensor | None, b_in: Tensor | None, w_rec: Tensor, w_pop: Tensor,
                     weights: Tensor | None, n_iter: int, pooling: str) -> tuple[Tensor, Tensor]:
    """What :func:`iterate` computes (same arguments), in plain differentiable PyTorch ops: the double
    backward of :class:`FusedIterations` differentiates it."""
    x_proj = inp if w_in is None else F.linear(inp, w_in, b_in)
    h, c = lstm_pointwise(x_proj, None)
    for _ in range(n_iter - 1):
        pooled = masked_mean(h, weights=weights).unsqueeze(1) if pooling == "mean" else causal_mean(h)
        h, c = lstm_pointwise(x_proj + F.linear(h, w_rec) + F.linear(pooled, w_pop), c)
    return h, c


def _grads_of(fn, inputs: tuple[Tensor | None, ...], needs: tuple[bool, ...],
              grad_outputs: tuple[Tensor | None, ...]) -> list[Tensor | None]:
    """The vector-Jacobian product of ``fn(*inputs)`` with ``grad_outputs`` for the ``inputs`` that ``needs``
    marks (None for the others), differentiable: the double backward of the Functions here. ``torch.func.vjp``
    keeps one input apart from another that depends on it (an iteration's gates and its cell state)."""
    wanted = [k for k, (t, need) in enumerate(zip(inputs, needs, strict=True)) if need and t is not None]

    def at(*values: Tensor) -> tuple[Tensor, ...]:
        args = list(inputs)
        for k, v in zip(wanted, values, strict=True):
            args[k] = v
        return fn(*args)

    out, vjp = torch.func.vjp(at, *(inputs[k] for k in wanted))
    grads = vjp(tuple(torch.zeros_like(o) if g is None else g for o, g in zip(out, grad_outputs, strict=True)))
    result: list[Tensor | None] = [None] * len(inputs)
    for k, g in zip(wanted, grads, strict=True):
        result[k] = g
    return result


class FusedLSTMPointwise(torch.autograd.Function):
    """(a + p, c) -> (h, c', gates, tanh c') with a hand-written backward; :func:`fused_lstm_pointwise` gives
    (h, c').

    Autograd of the reference slices the 4H gate block into four views, and each slice's backward
    materialises a zero-filled (B, N, 4H) tensor; here the gate gradient is written into one tensor, and only
    the activated gates, the previous cell state and tanh(c') are kept for backward (nothing is activated
    again there). ``p`` broadcasts against ``a`` (one population term per set for mean pooling).

    The activated gates and tanh(c') are outputs too, so that the backward can be differentiated: with
    ``create_graph=True`` (or when a gradient of those outputs comes in, which only a double backward sends)
    it runs the same formulas in plain differentiable ops of the kept tensors, whose own gradients flow back
    through this Function. Second and higher derivatives are therefore exact, and the first-order backward
    costs what it did before they were.
    """

    generate_vmap_rule = True  # inside a transform that does not trace its inputs (see plain_ops_only)

    @staticmethod
    def forward(a: Tensor, p: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        H = a.shape[-1] // 4
        gates = _activated(a, p)
        i, f, o, g = gates.split(H, dim=-1)
        c_new = i * g
        c_new.addcmul_(f, c)
        tc = torch.tanh(c_new)
        return o * tc, c_new, gates, tc

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        (_, p, c), (_, _, gates, tc) = inputs, output
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(gates, c, tc)
        ctx.p_shape = p.shape

    @staticmethod
    def backward(ctx, dh: Tensor | None, dc: Tensor | None, dgates: Tensor | None,
                 dtc: Tensor | None) -> tuple[Tensor | None, ...]:
        gates, c, tc = ctx.saved_tensors
        if torch.is_grad_enabled() or dgates is not None or dtc is not None or _traced(dh, dc):
            return _pointwise_vjp(gates, c, tc, dh, dc, dgates, dtc, ctx.p_shape)
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


def fused_lstm_pointwise(a: Tensor, p: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`lstm_pointwise` of ``a + p`` and ``c`` through :class:`FusedLSTMPointwise`: (h, c')."""
    h, c_new, _, _ = FusedLSTMPointwise.apply(a, p, c)
    return h, c_new


def _pointwise_vjp(gates: Tensor, c: Tensor, tc: Tensor, dh: Tensor | None, dc: Tensor | None,
                   dgates: Tensor | None, dtc: Tensor | None, p_shape: torch.Size) -> tuple[Tensor, Tensor, Tensor]:
    """The backward of :class:`FusedLSTMPointwise` in plain (differentiable, out-of-place) ops, from its kept
    tensors and the gradients of all four outputs (None for none)."""
    H = gates.shape[-1] // 4
    i, f, o, g = gates.split(H, dim=-1)
    d_tc = dtc if dh is None else (dh * o if dtc is None else dh * o + dtc)  # gradient of tanh(c')
    d_cn = torch.zeros_like(tc) if d_tc is None else d_tc * (1 - tc * tc)  # gradient of c'
    if dc is not None:
        d_cn = d_cn + dc
    d_o = torch.zeros_like(tc) if dh is None else dh * tc
    d_act = torch.cat([d_cn * g, d_cn * c, d_o, d_cn * i], dim=-1)  # gradient of the activated gates
    if dgates is not None:
        d_act = d_act + dgates
    sig, tg = gates[..., : 3 * H], gates[..., 3 * H :]
    da = torch.cat([d_act[..., : 3 * H] * sig * (1 - sig), d_act[..., 3 * H :] * (1 - tg * tg)], dim=-1)
    dp = da if p_shape == da.shape else da.sum_to_size(p_shape)
    return da, dp, d_cn * f


def _activated(a: Tensor, p: Tensor) -> Tensor:
    """The activated gates (sigmoid of the in, f, o blocks, tanh of g) of a + p, in a new tensor."""
    H = a.shape[-1] // 4
    gates = a + p
    gates[..., : 3 * H].sigmoid_()
    gates[..., 3 * H :].tanh_()
    return gates


def usable_kernels(x: Tensor, weight: Tensor, *others: Tensor | None) -> _ext.Kernels | None:
    """The C++ kernels where they can run a call on ``x`` with weights like ``weight`` (and the call's
    ``others`` tensors): a non-empty CPU float32 or float64 input of the weights' dtype, outside autocast and
    :func:`plain_ops_only`. None elsewhere, and where the kernels are switched off (``SWARMCTL_NO_EXT=1``) or
    cannot be built."""
    if not _ext.Kernels.supports(x) or torch.is_autocast_enabled("cpu") or plain_ops_only(x, *others):
        return None
    return _ext.kernels() if x.shape[:-1].numel() > 0 and weight.dtype == x.dtype else None


def input_terms(x_proj: Tensor | None, x: Tensor | None, w_in: Tensor | None, b_in: Tensor | None,
                rows: int) -> dict[str, Tensor | None]:
    """The input term Wx x + b as the kernels take it, for ``rows`` rows: the projection ``x_proj`` itself,
    or the input ``x`` with its weights (the kernels project an input of up to ``FUSED_INPUT_MAX`` features
    themselves; a wider one is projected here)."""
    if x_proj is None and x.shape[-1] > FUSED_INPUT_MAX:
        x_proj = torch.nn.functional.linear(x, w_in, b_in)
    if x_proj is not None:
        return {"b": x_proj.detach().reshape(rows, -1).contiguous()}
    return {"x": x.detach().reshape(rows, -1).contiguous(), "wxT": w_in.detach().t().contiguous(),
            "bias": None if b_in is None else b_in.detach().contiguous()}


def _kernel_step(kernels: _ext.Kernels, h: Tensor | None, c: Tensor | None, pooled: Tensor | None, w_rec: Tensor,
                w_pop: Tensor, terms: dict[str, Tensor | None], gates: Tensor, h_out: Tensor, c_out: Tensor) -> None:
    """One iteration of ``SwarmCell.step`` through the kernels, on R rows: writes the activated gates (R, 4H),
    h (R, H) and c (R, H) into ``gates``, ``h_out`` and ``c_out``.

    ``h``, ``c``: the previous states (R, H), None for the zero state; ``pooled``: (R, H) one per row, or
    (S, H) one per set of R / S consecutive rows; ``terms``: :func:`input_terms`. ``c_out`` may be ``c``.
    """
    if h is None:
        kernels.forward(gates, h_out, c_out, **terms)
        return
    torch.mm(h, w_rec.t(), out=gates)  # (R, 4H)
    p, rows_per_set = None, 1
    if pooled.shape[0] == h.shape[0]:
        gates.addmm_(pooled, w_pop.t())
    else:
        p, rows_per_set = pooled @ w_pop.t(), h.shape[0] // pooled.shape[0]  # (S, 4H): once per set
    kernels.forward(gates, h_out, c_out, a=gates, p=p, rows_per_set=rows_per_set, c_prev=c, **terms)


STEP_ROWS = 2048  # rows per kernel call in a step without gradients: the gate scratch stays small and reused


def kernel_step_rows(kernels: _ext.Kernels, h: Tensor | None, c: Tensor | None, pooled: Tensor | None,
                     w_rec: Tensor, w_pop: Tensor, terms: dict[str, Tensor | None], h_out: Tensor,
                     c_out: Tensor) -> None:
    """:func:`_kernel_step` without gradients (the activated gates are not kept), ``STEP_ROWS`` rows at a time:
    a large set's step needs no (R, 4H) gate tensor, whose fresh allocation every step costs more than the
    step's element-wise work. Blocks never cut a set whose pooled h is shared, except into blocks of that set
    alone."""
    R = h_out.shape[0]
    per_set = 1 if pooled is None else R // pooled.shape[0]  # rows per pooled h (1: one per row)
    gates = h_out.new_empty(min(R, STEP_ROWS), w_rec.shape[0])
    start = 0
    while start < R:
        if per_set >= STEP_ROWS:  # a part of one set
            end = min(start + STEP_ROWS, (start // per_set + 1) * per_set)
        else:  # whole sets
            end = min(R, start + STEP_ROWS // per_set * per_set)
        pool = None if pooled is None else pooled[start // per_set : -(-end // per_set)]  # the sets of these rows
        rows = slice(start, end)
        part = {k: v[rows] if k in ("b", "x") else v for k, v in terms.items()}
        _kernel_step(kernels, None if h is None else h[rows], None if c is None else c[rows], pool, w_rec, w_pop,
                    part, gates[: end - start], h_out[rows], c_out[rows])
        start = end


def _rows(t: Tensor | None, R: int, H: int) -> tuple[Tensor, int] | None:
    """(B, N, H) gradient as rows for the kernels: the tensor and its row stride (copied only if needed)."""
    if t is None:
        return None
    B, N, _ = t.shape
    if t.stride(2) == 1 and t.stride(0) == N * t.stride(1):
        return t, t.stride(1)
    return t.reshape(R, H).contiguous(), H


def iterate(
    kernels: _ext.Kernels, inp: Tensor, w_in: Tensor | None, b_in: Tensor | None, w_rec: Tensor, w_pop: Tensor,
    weights: Tensor | None, n_iter: int, pooling: str, keep: bool
) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """All iterations of the layer with the fused kernels (:func:`_kernel_step` each); with ``keep`` the
    tensors for the backward.

    ``inp`` is the input x (B, N, D) with its projection ``w_in``, ``b_in``, or the input projection
    (B, N, 4H) itself with ``w_in`` None. Kept: the activated gates (n_iter, R, 4H), h and c of every
    iteration (n_iter, R, H), and the pooled h of iterations 1..n_iter-1: (n_iter - 1, B, H) for mean pooling,
    (n_iter - 1, R, H) for causal pooling (so the backward needs no second cumulative sum). R = B * N rows.
    """
    B, N, _ = inp.shape
    G = w_rec.shape[0]
    H, R = G // 4, B * N
    w_rec, w_pop = w_rec.detach(), w_pop.detach()
    terms = input_terms(inp, None, None, None, R) if w_in is None else input_terms(None, inp, w_in, b_in, R)
    if weights is not None:
        weights = weights.contiguous()
    gates = inp.new_empty(n_iter if keep else 1, R, G)
    hs = inp.new_empty(n_iter if keep else 2, R, H)
    cs = inp.new_empty(n_iter if keep else 2, R, H)
    pooled = inp.new_empty(max(n_iter - 1, 0), B if pooling == "mean" else R, H) if keep else None
    _kernel_step(kernels, None, None, None, w_rec, w_pop, terms, gates[0], hs[0], cs[0])
    for t in range(1, n_iter):
        prev, cur = (t - 1, t) if keep else ((t - 1) % 2, t % 2)
        h_prev = hs[prev].view(B, N, H)
        # (B, H), one per set, or (R, H), one per row
        pool = masked_mean(h_prev, weights=weights) if pooling == "mean" else causal_mean(h_prev).view(R, H)
        if pooled is not None:
            pooled[t - 1] = pool
        _kernel_step(kernels, hs[prev], cs[prev], pool, w_rec, w_pop, terms, gates[t if keep else 0], hs[cur], cs[cur])
    last = n_iter - 1 if keep else (n_iter - 1) % 2
    saved = (gates, hs, cs) + ((pooled,) if pooled is not None else ())
    return hs[last].view(B, N, H), cs[last].view(B, N, H), saved


class FusedIterations(torch.autograd.Function):
    """(x or x_proj, Wx, b, Wh, Wp) -> final (h, c) of all iterations, through the fused kernels.

    Backward, from the last iteration to the first: the kernel computes the gate gradient da_t from the
    kept gates (and, for mean pooling, sums it per set; for a narrow input, accumulates the input
    projection's gradients); da_t Wh (plus the pooling's backward) gives the gradient of h_{t-1}, and
    da_t h_{t-1} is added to the recurrent weight's gradient. The saved tensors are only read, so the
    backward may run more than once (retain_graph, gradcheck). With ``create_graph=True`` the backward
    differentiates :func:`plain_iterations` from the saved inputs instead (the kernels' backward is not itself
    differentiable), so second derivatives are exact.
    """

    generate_vmap_rule = True  # inside a transform that does not trace its inputs (see plain_ops_only)

    @staticmethod
    def forward(inp, w_in, b_in, w_rec, w_pop, weights, n_iter, pooling, kernels):
        h, c, saved = iterate(kernels, inp, w_in, b_in, w_rec, w_pop, weights, n_iter, pooling, keep=True)
        return h, c, *saved  # the kept tensors are outputs too, without gradients: (h, c) is the result

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        inp, *_, n_iter, pooling, kernels = inputs
        ctx.kernels, ctx.pooling, ctx.n_rows, ctx.n_iter = kernels, pooling, inp.shape[:2], n_iter
        ctx.state_shape = output[0].shape
        ctx.mark_non_differentiable(*output[2:])
        ctx.set_materialize_grads(False)  # no zeros for the kept tensors' gradients ...
        ctx.save_for_backward(*inputs[:6], *output[2:])

    @staticmethod
    def backward(ctx, dh_out, dc_out, *_):
        zeros = ctx.saved_tensors[6].new_zeros  # ... but for an unused h or c, as autograd would give them
        dh_out, dc_out = (zeros(ctx.state_shape) if d is None else d for d in (dh_out, dc_out))
        if torch.is_grad_enabled() or _traced(dh_out, dc_out):  # create_graph=True, or batched gradients
            inp, w_in, b_in, w_rec, w_pop, weights = ctx.saved_tensors[:6]
            def run(inp, w_in, b_in, w_rec, w_pop):
                return plain_iterations(inp, w_in, b_in, w_rec, w_pop, weights, ctx.n_iter, ctx.pooling)

            return (*_grads_of(run, (inp, w_in, b_in, w_rec, w_pop), ctx.needs_input_grad[:5], (dh_out, dc_out)),
                    None, None, None, None)
        with torch.no_grad():
            return FusedIterations._backward(ctx, dh_out, dc_out)

    @staticmethod
    def _backward(ctx, dh_out, dc_out):
        kernels, pooling = ctx.kernels, ctx.pooling
        inp, w_in, _, w_rec, w_pop, weights, gates, hs, cs, *rest = ctx.saved_tensors
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
        if not mean and n_iter > 1:  # one product gives both gradients of an iteration's h: [Wh | Wp]
            w_both = torch.cat([w_rec, w_pop], dim=1)  # (G, 2H)
            dh_both = gates.new_empty(R, 2 * H)
            steps = torch.arange(1, N + 1, dtype=gates.dtype).view(1, N, 1)
        dc_bufs = (gates.new_empty(R, H), gates.new_empty(R, H)) if n_iter > 1 else ()
        dpool = None
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
            d_pop.addmm_((dp if mean else da).t(), rest[0][t - 1])  # rest[0][t - 1]: the pooled h this iteration saw
            if mean:
                dh, dpool = (da @ w_rec, H), dp @ w_pop  # dpool (B, H): spread over rows by the kernel
            else:  # causal mean: out_j = cumsum(h)_j / (j + 1), so dh_i = sum_{j >= i} d_j / (j + 1)
                torch.mm(da, w_both, out=dh_both)  # [da Wh | da Wp], (R, 2H)
                s = dh_both[:, H:].view(B, N, H).div(steps)
                dh_both[:, :H] += s.flip(1).cumsum(1).flip(1).view(R, H)  # suffix sums: exact zeros stay zero
                dh = (dh_both, 2 * H)  # the kernel reads the first H columns of each row
            dc = (dc_prev, H)
        if narrow:
            d_inp = terms["dx"].view(inp.shape) if need[0] else None
            d_w_in, d_b_in = terms["dwxT"].t(), terms["db"]
        elif d_inp is not None:
            d_inp = d_inp.view(B, N, G)
        return (d_inp, d_w_in, d_b_in, d_rec if need[3] else None, d_pop if need[4] else None,
                None, None, None, None)

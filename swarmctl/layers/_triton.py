"""The SWARM cell fused with Triton for the GPU: one kernel per iteration does the LSTM update of
:meth:`swarmctl.layers.swarm.SwarmCell.step` and the pooling of the new h, one kernel its backward; the matrix
products stay with cuBLAS. Imported only when ``swarm.triton_cell`` is entered (importing Triton takes time);
under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (the CPU tests).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import Tensor

from swarmctl.layers._fused import plain_ops_only

BLOCK_N = 32  # entities per loop step of a program
BLOCK_H = 64  # hidden units per program (fewer for a smaller H)
_POOL = {None: 0, "mean": 1, "causal": 2}  # the kernels' POOL
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def interpreting() -> bool:
    """True where Triton runs its kernels in its interpreter (on CPU tensors) instead of compiling them."""
    return bool(triton.knobs.runtime.interpret)


def usable(x: Tensor, *others: Tensor | None) -> bool:
    """Whether the fused cell can run on ``x``: a non-empty CUDA tensor (a CPU one under the interpreter) of
    a floating dtype the kernels take, outside ``torch.compile`` and ``torch.func`` transforms (of ``x`` or the
    call's ``others`` tensors)."""
    on_device = x.is_cuda or (x.device.type == "cpu" and interpreting())
    return on_device and x.dtype in DTYPES and x.numel() > 0 and not plain_ops_only(x, *others)


@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1  # tl has no tanh of its own; exact to rounding


@triton.jit(do_not_specialize=["N"])  # one compiled kernel for every set size
def _cell_forward(a_ptr, p_ptr, c_ptr, w_ptr, gates_ptr, h_ptr, cn_ptr, pool_ptr, N, H,
                  HAS_P: tl.constexpr, HAS_C: tl.constexpr, POOL: tl.constexpr, ACC: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program (b, j): set b, hidden units j * BLOCK_H.. of every entity, entities in order. a (B*N, 4H) gate
    pre-activations, p (B, 4H) one term per set, c (B*N, H) the previous cell state; writes the activated
    gates, h, c' and the pooling of h': (B, H) the mean weighted by w (B, N), or (B*N, H) the causal mean."""
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_h = cols < H
    G = 4 * H
    if HAS_P:
        p_i = tl.load(p_ptr + b * G + cols, mask=in_h, other=0).to(ACC)
        p_f = tl.load(p_ptr + b * G + H + cols, mask=in_h, other=0).to(ACC)
        p_o = tl.load(p_ptr + b * G + 2 * H + cols, mask=in_h, other=0).to(ACC)
        p_g = tl.load(p_ptr + b * G + 3 * H + cols, mask=in_h, other=0).to(ACC)
    total = tl.zeros((BLOCK_H,), ACC)  # the weighted sum (mean) or running sum (causal) of h'
    for n0 in range(0, N, BLOCK_N):
        rows = n0 + tl.arange(0, BLOCK_N)
        in_n = rows < N
        m = in_n[:, None] & in_h[None, :]
        r = (b * N + rows).to(tl.int64)[:, None]
        ga = a_ptr + r * G + cols[None, :]
        a_i = tl.load(ga, mask=m, other=0).to(ACC)
        a_f = tl.load(ga + H, mask=m, other=0).to(ACC)
        a_o = tl.load(ga + 2 * H, mask=m, other=0).to(ACC)
        a_g = tl.load(ga + 3 * H, mask=m, other=0).to(ACC)
        if HAS_P:
            a_i += p_i[None, :]
            a_f += p_f[None, :]
            a_o += p_o[None, :]
            a_g += p_g[None, :]
        i = tl.sigmoid(a_i)
        f = tl.sigmoid(a_f)
        o = tl.sigmoid(a_o)
        g = _tanh(a_g)
        c_new = i * g
        if HAS_C:
            c_new += f * tl.load(c_ptr + r * H + cols[None, :], mask=m, other=0).to(ACC)
        h = tl.where(m, o * _tanh(c_new), 0)
        gs = gates_ptr + r * G + cols[None, :]
        tl.store(gs, i.to(gates_ptr.dtype.element_ty), mask=m)
        tl.store(gs + H, f.to(gates_ptr.dtype.element_ty), mask=m)
        tl.store(gs + 2 * H, o.to(gates_ptr.dtype.element_ty), mask=m)
        tl.store(gs + 3 * H, g.to(gates_ptr.dtype.element_ty), mask=m)
        tl.store(h_ptr + r * H + cols[None, :], h.to(h_ptr.dtype.element_ty), mask=m)
        tl.store(cn_ptr + r * H + cols[None, :], c_new.to(cn_ptr.dtype.element_ty), mask=m)
        if POOL == 1:
            w = tl.load(w_ptr + b * N + rows, mask=in_n, other=0).to(ACC)
            total += tl.sum(h * w[:, None], axis=0)
        if POOL == 2:
            running = tl.cumsum(h, axis=0) + total[None, :]
            mean = running / (rows + 1).to(ACC)[:, None]
            tl.store(pool_ptr + r * H + cols[None, :], mean.to(pool_ptr.dtype.element_ty), mask=m)
            total += tl.sum(h, axis=0)
    if POOL == 1:
        tl.store(pool_ptr + b * H + cols, total.to(pool_ptr.dtype.element_ty), mask=in_h)


@triton.jit(do_not_specialize=["N"])  # one compiled kernel for every set size
def _cell_backward(gates_ptr, c_ptr, cn_ptr, w_ptr, dh_ptr, dc_ptr, dpool_ptr, da_ptr, dp_ptr, dcp_ptr, N, H,
                   HAS_C: tl.constexpr, HAS_DH: tl.constexpr, HAS_DC: tl.constexpr, POOL: tl.constexpr,
                   HAS_DP: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr):
    """The gradients of :func:`_cell_forward`, entities from last to first (the causal mean's gradient is a
    suffix sum): the gate gradient da (B*N, 4H), its sum per set dp (B, 4H) and the previous cell state's
    gradient (B*N, H), from the gradients of h', c' and the pooled h'."""
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_h = cols < H
    G = 4 * H
    if POOL == 1:
        dpool = tl.load(dpool_ptr + b * H + cols, mask=in_h, other=0).to(ACC)
    later = tl.zeros((BLOCK_H,), ACC)  # causal: sum over later positions j of dpool_j / (j + 1)
    dp_i = tl.zeros((BLOCK_H,), ACC)
    dp_f = tl.zeros((BLOCK_H,), ACC)
    dp_o = tl.zeros((BLOCK_H,), ACC)
    dp_g = tl.zeros((BLOCK_H,), ACC)
    n_blocks = tl.cdiv(N, BLOCK_N)
    for k in range(0, n_blocks):
        rows = (n_blocks - 1 - k) * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = rows < N
        m = in_n[:, None] & in_h[None, :]
        r = (b * N + rows).to(tl.int64)[:, None]
        at = r * H + cols[None, :]
        dh = tl.zeros((BLOCK_N, BLOCK_H), ACC)
        if HAS_DH:
            dh += tl.load(dh_ptr + at, mask=m, other=0).to(ACC)
        if POOL == 1:
            w = tl.load(w_ptr + b * N + rows, mask=in_n, other=0).to(ACC)
            dh += w[:, None] * dpool[None, :]
        if POOL == 2:
            s = tl.load(dpool_ptr + at, mask=m, other=0).to(ACC) / (rows + 1).to(ACC)[:, None]
            upto = tl.cumsum(s, axis=0)
            block = tl.sum(s, axis=0)
            dh += later[None, :] + block[None, :] - upto + s  # sum over j >= n of s_j
            later += block
        gs = gates_ptr + r * G + cols[None, :]
        i = tl.load(gs, mask=m, other=0).to(ACC)
        f = tl.load(gs + H, mask=m, other=0).to(ACC)
        o = tl.load(gs + 2 * H, mask=m, other=0).to(ACC)
        g = tl.load(gs + 3 * H, mask=m, other=0).to(ACC)
        tc = _tanh(tl.load(cn_ptr + at, mask=m, other=0).to(ACC))
        dct = dh * o * (1 - tc * tc)  # dc' = dc + dh o (1 - tanh(c')^2)
        if HAS_DC:
            dct += tl.load(dc_ptr + at, mask=m, other=0).to(ACC)
        da_i = dct * g * i * (1 - i)
        da_o = dh * tc * o * (1 - o)
        da_g = dct * i * (1 - g * g)
        if HAS_C:
            da_f = dct * tl.load(c_ptr + at, mask=m, other=0).to(ACC) * f * (1 - f)
            tl.store(dcp_ptr + at, (dct * f).to(dcp_ptr.dtype.element_ty), mask=m)
        else:
            da_f = tl.zeros((BLOCK_N, BLOCK_H), ACC)
        ds = da_ptr + r * G + cols[None, :]
        tl.store(ds, da_i.to(da_ptr.dtype.element_ty), mask=m)
        tl.store(ds + H, da_f.to(da_ptr.dtype.element_ty), mask=m)
        tl.store(ds + 2 * H, da_o.to(da_ptr.dtype.element_ty), mask=m)
        tl.store(ds + 3 * H, da_g.to(da_ptr.dtype.element_ty), mask=m)
        if HAS_DP:  # masked rows hold zeros (every load there gave 0)
            dp_i += tl.sum(da_i, axis=0)
            dp_f += tl.sum(da_f, axis=0)
            dp_o += tl.sum(da_o, axis=0)
            dp_g += tl.sum(da_g, axis=0)
    if HAS_DP:
        out = dp_ptr + b * G + cols
        tl.store(out, dp_i.to(dp_ptr.dtype.element_ty), mask=in_h)
        tl.store(out + H, dp_f.to(dp_ptr.dtype.element_ty), mask=in_h)
        tl.store(out + 2 * H, dp_o.to(dp_ptr.dtype.element_ty), mask=in_h)
        tl.store(out + 3 * H, dp_g.to(dp_ptr.dtype.element_ty), mask=in_h)


def _launch(B: int, H: int, dtype: torch.dtype) -> tuple[tuple[int, int], dict]:
    block_h = min(BLOCK_H, triton.next_power_of_2(H))
    acc = tl.float64 if dtype == torch.float64 else tl.float32  # half precision is computed in float32
    return (B, triton.cdiv(H, block_h)), {"ACC": acc, "BLOCK_N": BLOCK_N, "BLOCK_H": block_h}


class TritonCell(torch.autograd.Function):
    """(a, p, c) -> (h', c', pooled h') of one iteration, with the backward fused too.

    a: gate pre-activations (B, N, 4H) (input projection, Wh h and, for causal pooling, Wp of the pooled h);
    p: Wp of the mean-pooled h (B, 4H), one per set, or None; c: the previous cell state (B, N, H), or None
    for the zero state; weights: (B, N), the pooling weights of mean pooling (1/n_real for real entities, 0
    for padding); pooling: "mean", "causal" or None (the last iteration: nothing pools its h). Returns h' and
    c' (B, N, H) and the pooled h': (B, H) for "mean", (B, N, H) for "causal", an empty tensor for None.
    Kept for the backward: the activated gates, c and c' (the cell's own tensors, as the eager step keeps).
    """

    generate_vmap_rule = True  # inside a transform that does not trace its inputs (see usable)

    @staticmethod
    def forward(a: Tensor, p: Tensor | None, c: Tensor | None, weights: Tensor | None,
                pooling: str | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        B, N, G = a.shape
        H = G // 4
        a = a.contiguous()
        p = None if p is None else p.contiguous()
        c = None if c is None else c.contiguous()
        gates = torch.empty_like(a)
        h, c_new = a.new_empty(B, N, H), a.new_empty(B, N, H)
        pooled = a.new_empty({None: (0,), "mean": (B, H), "causal": (B, N, H)}[pooling])
        grid, meta = _launch(B, H, a.dtype)
        _cell_forward[grid](a, a if p is None else p, a if c is None else c, a if weights is None else weights,
                            gates, h, c_new, pooled, N, H, HAS_P=p is not None, HAS_C=c is not None,
                            POOL=_POOL[pooling], **meta)
        return h, c_new, pooled, gates  # the activated gates: an output without gradient, kept for the backward

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        (_, p, c, weights, pooling), (_, c_new, _, gates) = inputs, output
        ctx.set_materialize_grads(False)
        ctx.pooling, ctx.has_p, ctx.has_c = pooling, p is not None, c is not None
        ctx.mark_non_differentiable(gates)
        ctx.save_for_backward(gates, None if c is None else c.contiguous(), c_new, weights)

    @staticmethod
    def backward(ctx, dh: Tensor | None, dc: Tensor | None, dpool: Tensor | None, _dgates: None):
        if torch.is_grad_enabled():  # create_graph=True: the kernel's backward is not differentiable itself
            raise RuntimeError("the Triton SWARM cell has no second derivatives (create_graph=True, "
                               "gradgradcheck): run the layer outside swarmctl.layers.swarm.triton_cell(), whose "
                               "PyTorch path has them")
        return TritonCell._backward(ctx, dh, dc, dpool)

    @staticmethod
    def _backward(ctx, dh: Tensor | None, dc: Tensor | None, dpool: Tensor | None):
        gates, c, c_new, weights = ctx.saved_tensors
        B, N, G = gates.shape
        H = G // 4
        pool = _POOL[ctx.pooling if dpool is not None else None]
        da = torch.empty_like(gates)
        dp = gates.new_empty(B, G) if ctx.has_p else None
        dc_prev = torch.empty_like(c_new) if ctx.has_c else None
        grid, meta = _launch(B, H, gates.dtype)
        dh, dc, dpool = (None if t is None else t.contiguous() for t in (dh, dc, dpool))
        _cell_backward[grid](gates, gates if c is None else c, c_new, gates if weights is None else weights,
                             gates if dh is None else dh, gates if dc is None else dc,
                             gates if dpool is None else dpool, da, gates if dp is None else dp,
                             gates if dc_prev is None else dc_prev, N, H, HAS_C=ctx.has_c, HAS_DH=dh is not None,
                             HAS_DC=dc is not None, POOL=pool, HAS_DP=ctx.has_p, **meta)
        return da, dp, dc_prev, None, None


def swarm_states(x_proj: Tensor, w_rec: Tensor, w_pop: Tensor, weights: Tensor | None, n_iter: int,
                 pooling: str) -> tuple[Tensor, Tensor]:
    """All iterations of a SWARM layer from its input projection ``x_proj`` (B, N, 4H): final (h, c), each
    (B, N, H). Per iteration two matrix products (``Wh h``, ``Wp`` of the pooled h; cuBLAS) and one
    :class:`TritonCell`, which also pools the new h for the next iteration. ``weights`` (B, N) from
    ``mask_weights`` (None: every entity real) for mean pooling, None for causal pooling."""
    B, N, G = x_proj.shape
    H, R = G // 4, B * N
    if pooling == "mean" and weights is None:
        exact = torch.float64 if x_proj.dtype == torch.float64 else torch.float32
        weights = x_proj.new_full((B, N), 1.0 / N, dtype=exact)
    h, c, pooled, _ = TritonCell.apply(x_proj, None, None, weights, pooling if n_iter > 1 else None)
    for t in range(1, n_iter):
        a = torch.addmm(x_proj.reshape(R, G), h.reshape(R, H), w_rec.t())  # (R, 4H)
        p = F.linear(pooled, w_pop) if pooling == "mean" else None  # (B, 4H): once per set
        if p is None:
            a = torch.addmm(a, pooled.reshape(R, H), w_pop.t())
        h, c, pooled, _ = TritonCell.apply(a.view(B, N, G), p, c, weights, pooling if t < n_iter - 1 else None)
    return h, c

"""Contract checks for set models, shipped so that users can test their own models the same way:
permutation equivariance, padding invariance, order dependence, causality; the module contracts PyTorch
checks on its own modules (first and second derivatives, ``torch.func``, factory keyword arguments, masked
entities without influence, input shapes refused with a message); random padded sets to check them on, and
the SWARM layer's reference formulation. For tests (the suite's and users'): the library never imports it."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from swarmctl.data.dataset import random_sets

__all__ = ["assert_causal", "assert_factory_kwargs", "assert_masked_no_influence", "assert_padding_invariant",
           "assert_permutation_equivariant", "assert_permutation_invariant", "assert_rejects_bad_shapes",
           "assert_twice_differentiable", "order_dependence", "random_sets", "reference_swarm_states"]

SetFn = Callable[[Tensor, Tensor], Tensor]


def reference_swarm_states(layer: nn.Module, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """A SWARM layer's final states (h, c), each (B, N, H), written out from the paper's sec. 3 (SWARM Mappings)
    with plain autograd ops and the layer's own weights (``layer.cell.input``, ``.recurrent``, ``.population``): from
    zero states, ``layer.n_iter`` times, every entity i of every set gets

        a_i = Wx x_i + b + Wh h_i + Wp p_i,   (i, f, o, g) = (sigmoid, sigmoid, sigmoid, tanh) of a_i's blocks,
        c_i = f c_i + i g,   h_i = o tanh(c_i),

    where p_i is the mean of h over the real entities of the set (``mask`` (B, N) bool, True = present; None
    = all; an empty set pools to zero) for mean pooling, and over entities 0..i for causal pooling. Every
    projection is recomputed per entity in every iteration. The layer's output is
    ``layer.output(torch.cat([h, c], -1))``. The reference of the layer's tests and the naive baseline of
    ``benchmarks/layer_throughput.py``."""
    cell = layer.cell
    B, N, _ = x.shape
    h = x.new_zeros(B, N, cell.dim_hidden)
    c = torch.zeros_like(h)
    real = x.new_ones(B, N, 1) if mask is None else mask.to(x.dtype).unsqueeze(-1)
    steps = torch.arange(1, N + 1, dtype=x.dtype, device=x.device).view(1, N, 1)
    for _ in range(layer.n_iter):
        if cell.pooling == "mean":
            p = ((h * real).sum(1, keepdim=True) / real.sum(1, keepdim=True).clamp_min(1)).expand(B, N, -1)
        else:
            p = h.cumsum(1) / steps
        a = cell.input(x) + cell.recurrent(h) + cell.population(p)
        gi, gf, go, gg = a.chunk(4, dim=-1)
        c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gg)
        h = torch.sigmoid(go) * torch.tanh(c)
    return h, c


def _permuted(fn: SetFn, x: Tensor, mask: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """``fn`` of the sets with their entities in a random order, and that order (n_sets, n)."""
    perm = torch.argsort(torch.rand(x.shape[0], x.shape[1], generator=generator), dim=1)
    return fn(_gather(x, perm), _gather(mask, perm)), perm


def _gather(t: Tensor, perm: Tensor) -> Tensor:
    return torch.take_along_dim(t, perm if t.dim() == 2 else perm.unsqueeze(-1), dim=1)


@torch.no_grad()
def assert_permutation_equivariant(
    fn: SetFn, x: Tensor, mask: Tensor, n_perms: int = 3, atol: float = 1e-6, rtol: float = 1e-5,
    generator: torch.Generator | None = None,
) -> None:
    """Permuting the entities of every set (padding included) permutes ``fn(x, mask)`` the same way."""
    out = fn(x, mask)
    for _ in range(n_perms):
        got, perm = _permuted(fn, x, mask, generator)
        want = _gather(out, perm)
        m = _gather(mask, perm)
        torch.testing.assert_close(got[m], want[m], atol=atol, rtol=rtol, msg="not permutation-equivariant")


@torch.no_grad()
def assert_permutation_invariant(
    fn: SetFn, x: Tensor, mask: Tensor, n_perms: int = 3, atol: float = 1e-6, rtol: float = 1e-5,
    generator: torch.Generator | None = None,
) -> None:
    """Permuting the entities of every set leaves ``fn(x, mask)`` (one output per set) unchanged."""
    out = fn(x, mask)
    for _ in range(n_perms):
        got, _ = _permuted(fn, x, mask, generator)
        torch.testing.assert_close(got, out, atol=atol, rtol=rtol, msg="not permutation-invariant")


@torch.no_grad()
def assert_padding_invariant(
    fn: SetFn, x: Tensor, mask: Tensor, n_pad: int = 5, atol: float = 1e-6, rtol: float = 1e-5,
    generator: torch.Generator | None = None,
) -> None:
    """Appending ``n_pad`` masked entities with random values leaves the real outputs unchanged."""
    out = fn(x, mask)
    pad = torch.randn(x.shape[0], n_pad, x.shape[2], dtype=x.dtype, generator=generator) * 10
    got = fn(torch.cat([x, pad], 1), torch.cat([mask, mask.new_zeros(x.shape[0], n_pad)], 1))
    torch.testing.assert_close(got[:, : x.shape[1]][mask], out[mask], atol=atol, rtol=rtol,
                               msg="padding changed real outputs")


@torch.no_grad()
def order_dependence(fn: SetFn, x: Tensor, mask: Tensor, generator: torch.Generator | None = None) -> float:
    """Largest change of a real entity's output when the entities are permuted (0 for equivariant fns)."""
    out = fn(x, mask)
    got, perm = _permuted(fn, x, mask, generator)
    m = _gather(mask, perm)
    return (got[m] - _gather(out, perm)[m]).abs().max().item()


def assert_causal(
    fn: Callable[[Tensor], Tensor], x: Tensor, positions: list[int] | None = None, inclusive: bool = True
) -> None:
    """For a sequence function ``fn: (1, N, D) -> (1, N, D_out)``: the gradient of output t with respect
    to every input after t (``inclusive=False``: at or after t) is exactly zero, and non-zero for some
    input before t (t > 0)."""
    n = x.shape[1]
    positions = list(range(n)) if positions is None else positions
    for t in positions:
        xg = x.detach().clone().requires_grad_(True)
        fn(xg)[0, t].sum().backward()
        grad = xg.grad[0].abs().sum(-1)  # (N,)
        first_forbidden = t + 1 if inclusive else t
        leak = grad[first_forbidden:].max().item() if first_forbidden < n else 0.0
        if leak != 0.0:
            raise AssertionError(f"output {t} depends on a later input (max grad {leak:.3g})")
        if t > 0 and grad[:t].max().item() == 0.0:
            raise AssertionError(f"output {t} depends on no earlier input")


def _real_part(out: Tensor, mask: Tensor) -> Tensor:
    """The outputs of real entities (per-entity outputs (B, N, ...)), or all of them (one output per set)."""
    return out[mask] if out.shape[:2] == mask.shape else out


def assert_masked_no_influence(
    fn: SetFn, x: Tensor, mask: Tensor, fills: tuple[float, ...] = (float("nan"), float("inf"), -float("inf"), 1e6),
    atol: float = 1e-6, rtol: float = 1e-5, grads: bool = True,
) -> None:
    """A mask's promise: whatever the masked entities of ``x`` hold (each of ``fills``, NaN and inf included),
    the real entities' outputs of ``fn(x, mask)`` (or the per-set outputs) stay what they are with zeros
    there, and finite where they were. ``mask`` (B, N) bool, True = present, should hide some entity.

    With ``grads`` (and a floating ``x``), the gradient of the real outputs' sum is also finite for every
    parameter of ``fn`` (an ``nn.Module``) and for ``x``, and zero at the masked entities: training on padded
    batches must not be poisoned either (a NaN times a zero gradient is NaN)."""
    if bool(mask.all()):
        raise ValueError("the mask hides no entity: give one with some False, or nothing is checked")
    pad = ~mask.unsqueeze(-1)
    with torch.no_grad():
        want = _real_part(fn(x.masked_fill(pad, 0.0), mask), mask)
        for fill in fills:
            got = _real_part(fn(x.masked_fill(pad, fill), mask), mask)
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol, equal_nan=False,
                                       msg=lambda m, fill=fill: f"masked entities holding {fill} changed real "
                                                                f"outputs: {m}")
    if not (grads and x.is_floating_point()):
        return
    params = dict((n, p) for n, p in fn.named_parameters() if p.requires_grad) if isinstance(fn, nn.Module) else {}
    for fill in fills:
        xg = x.detach().masked_fill(pad, fill).requires_grad_()
        with torch.enable_grad():
            gx, *gp = torch.autograd.grad(_real_part(fn(xg, mask), mask).sum(), [xg, *params.values()],
                                          allow_unused=True)
        if gx is not None and not (torch.isfinite(gx).all() and (gx[~mask] == 0).all()):
            raise AssertionError(f"masked entities holding {fill} reached the gradient of the input")
        bad = [n for n, g in zip(params, gp, strict=True) if g is not None and not torch.isfinite(g).all()]
        if bad:
            raise AssertionError(f"masked entities holding {fill} made the gradient of {', '.join(bad)} non-finite")


def assert_twice_differentiable(module: nn.Module, *inputs: Tensor | None, params: bool = True,
                                **gradcheck_kwargs) -> None:
    """First and second derivatives of ``module(*inputs)`` are right: ``torch.autograd.gradcheck`` and
    ``gradgradcheck`` in float64 (the module is copied and cast; floating inputs too) with respect to the
    floating inputs and, with ``params``, every parameter (through ``torch.func.functional_call``). Keep
    the module and the inputs tiny: the checks take one forward per input number. Non-floating inputs (a
    mask) pass through as they are; None too."""
    model = copy.deepcopy(module).double()
    floating = [i for i, t in enumerate(inputs) if t is not None and t.is_floating_point()]
    names = [n for n, p in model.named_parameters() if p.requires_grad] if params else []
    given = [inputs[i].detach().double().requires_grad_() for i in floating]
    weights = [dict(model.named_parameters())[n].detach().clone().requires_grad_() for n in names]

    def run(*args: Tensor) -> Tensor:
        values = list(inputs)
        for i, t in zip(floating, args[: len(floating)], strict=True):
            values[i] = t
        return functional_call(model, dict(zip(names, args[len(floating):], strict=True)), tuple(values))

    checked = (*given, *weights)
    if not checked:
        raise ValueError("nothing to differentiate: no floating input and no parameter")
    torch.autograd.gradcheck(run, checked, **gradcheck_kwargs)
    # gradgradcheck differentiates the backward that create_graph=True runs: it must be the right one first
    out = run(*checked)
    probe = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(0))
    plain = torch.autograd.grad(out, checked, probe, retain_graph=True, allow_unused=True)
    graphed = torch.autograd.grad(out, checked, probe, create_graph=True, allow_unused=True)
    for a, b in zip(graphed, plain, strict=True):
        if (a is None) != (b is None) or (a is not None and not torch.allclose(a, b, rtol=1e-7, atol=1e-10)):
            raise AssertionError("the first derivative differs with create_graph=True: its double backward is wrong")
    torch.autograd.gradgradcheck(run, checked, **gradcheck_kwargs)


def assert_factory_kwargs(cls: Callable[..., nn.Module], *args, **kwargs) -> None:
    """``cls(*args, **kwargs)`` takes the factory keyword arguments of ``torch.nn`` modules: built with
    ``device="meta"`` and ``dtype=torch.float64``, every floating parameter and buffer is on that device in
    that dtype (as PyTorch's own module tests check)."""
    module = cls(*args, device="meta", dtype=torch.float64, **kwargs)
    tensors = dict(module.named_parameters()) | dict(module.named_buffers())
    if not tensors:
        raise ValueError(f"{cls.__name__} has no parameter or buffer: the factory arguments make no difference")
    wrong = [f"{n} ({t.device}, {t.dtype})" for n, t in tensors.items()
             if t.device.type != "meta" or (t.is_floating_point() and t.dtype != torch.float64)]
    if wrong:
        raise AssertionError(f"{cls.__name__} ignores device=/dtype= for: {', '.join(wrong)}")


def assert_rejects_bad_shapes(fn: SetFn, x: Tensor, mask: Tensor, match: str = r"expects") -> None:
    """``fn(x, mask)`` runs, and refuses with a ValueError whose message matches ``match`` an input with one
    feature too many, one with one feature too few, and a mask one entity short: a wrong shape must never
    give a number."""
    fn(x, mask)
    wider = torch.cat([x, x[..., :1]], dim=-1)
    cases = {"one feature too many": (wider, mask), "one feature too few": (x[..., 1:], mask),
             "a mask one entity short": (x, mask[:, 1:])}
    for what, (bad_x, bad_mask) in cases.items():
        try:
            fn(bad_x, bad_mask)
        except ValueError as e:
            if not re.search(match, str(e)):
                raise AssertionError(f"{what}: refused, but the message does not match {match!r}: {e}") from None
        else:
            raise AssertionError(f"{what}: gave a result instead of a ValueError")

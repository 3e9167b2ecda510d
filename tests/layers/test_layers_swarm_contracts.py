"""SwarmLayer as a torch.nn module, checked with PyTorch's own tools on every path it has on the CPU (the
fused kernels, the PyTorch code without them, the compiled step): first and second derivatives
(gradcheck, gradgradcheck), torch.func transforms, input and mask shapes refused with a message, masked
entities without influence, factory keyword arguments, repr, torch.jit.trace refused, and what already
worked (pickle, deepcopy, state_dict, empty sets, zero batch, non-contiguous inputs, unbatched sets)."""

import copy
import io
import pickle
import re

import pytest
import torch
from conftest import tiered
from torch.autograd.gradcheck import GradcheckError

from swarmctl.layers import _ext
from swarmctl.layers.set_attention import ISAB, MAB, PMA, SAB
from swarmctl.layers.set_linear import SetLinear
from swarmctl.layers.swarm import SwarmCell, SwarmLayer
from swarmctl.testing import (
    assert_factory_kwargs,
    assert_masked_no_influence,
    assert_rejects_bad_shapes,
    assert_twice_differentiable,
    random_sets,
)

POOLINGS = ["mean", "causal"]


@pytest.fixture(params=["fused", "torch"])
def path(request, monkeypatch):
    """Each CPU path of the layer: the fused C++ kernels, and the PyTorch code (kernels switched off)."""
    if request.param == "fused":
        if _ext.disabled() or _ext.kernels() is None:
            pytest.skip("the fused kernels are switched off or cannot be built here")
    else:
        monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
    return request.param


def sets(dim_in=2, dtype=torch.float64):
    x, mask = random_sets(2, 4, dim_in, dtype=dtype, generator=torch.Generator().manual_seed(0))
    mask[0, 3] = mask[1, 2:] = False  # two padded sets
    return x, mask


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize(("dim_in", "params"), [  # projected inside the kernels / beforehand; the parameters too
    tiered(2, False, default=True), tiered(10, False, default=False), tiered(2, True, default=False)])
def test_first_and_second_derivatives_are_right(path, pooling, dim_in, params):
    """gradcheck and gradgradcheck in float64, with respect to the input (and every parameter: slow tier)."""
    torch.manual_seed(0)
    layer = SwarmLayer(dim_in, 2, 2, 2, pooling=pooling)
    x, mask = sets(dim_in)
    assert_twice_differentiable(layer, x[:, :3], mask[:, :3], params=params)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_hessian_vector_product_through_create_graph_equals_the_plain_ops(path, pooling):
    """grad(create_graph=True) then grad again, as gradient penalties do: equal to the same on the reference."""
    from swarmctl.testing import reference_swarm_states

    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    x, mask = sets()
    mask = mask if pooling == "mean" else None

    def hvp(states):
        xg = x.clone().requires_grad_()
        h, c = states(xg, mask)
        g, = torch.autograd.grad((h.sin().sum() + c.square().sum()), xg, create_graph=True)
        return torch.autograd.grad(g.square().sum(), [xg, *layer.parameters()], allow_unused=True)

    got = hvp(layer.states)
    # the layer zeroes padded inputs at its entry: padding holds nothing, so its own states do not depend on it
    want = hvp(lambda v, m: reference_swarm_states(layer, v if m is None else torch.where(m[..., None], v, 0), m))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.zeros(()) if g is None else g, torch.zeros(()) if w is None else w)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_torch_func_vmap_grad_and_jacrev_work(path, pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 2, pooling=pooling).double()
    x, _ = sets()
    per_set = torch.func.vmap(layer)(x)  # each call sees one unbatched set
    torch.testing.assert_close(per_set, layer(x))
    jac = torch.func.jacrev(layer)(x[0])  # (N, D_out, N, D_in)
    xg = x[0].clone().requires_grad_()
    want = torch.stack([torch.autograd.grad(layer(xg)[1, 0], xg, retain_graph=True)[0]])
    torch.testing.assert_close(jac[1, 0], want[0])
    params = dict(layer.named_parameters())
    per_sample = torch.func.vmap(torch.func.grad(lambda p, xi: torch.func.functional_call(layer, p, (xi,)).sum()),
                                 in_dims=(None, 0))(params, x)
    layer.zero_grad()
    layer(x[1:]).sum().backward()
    torch.testing.assert_close(per_sample["cell.recurrent.weight"][1], layer.cell.recurrent.weight.grad)


def test_a_wrong_input_width_or_mask_shape_is_refused_naming_both_shapes(path):
    layer = SwarmLayer(2, 4, 3, 2)
    x, mask = sets(dtype=torch.float32)
    assert_rejects_bad_shapes(layer, x, mask)
    with pytest.raises(ValueError, match=r"\(B, N, 2\).*got \(2, 4, 3\)"):
        layer(torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\).*got a bool mask of shape \(2, 3\)"):
        layer(x, mask[:, :3])
    with pytest.raises(ValueError, match="bool mask"):
        layer(x, mask.float())
    with pytest.raises(ValueError, match=r"got \(4,\)"):
        layer(torch.randn(4))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_an_unbatched_set_equals_a_batch_of_one(path, pooling):
    layer = SwarmLayer(2, 4, 3, 2, pooling=pooling)
    x, mask = sets(dtype=torch.float32)
    torch.testing.assert_close(layer(x[1], mask[1]), layer(x[1:], mask[1:])[0])
    torch.testing.assert_close(layer(x[1]), layer(x[1:])[0])


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("grad", [False, True])
def test_masked_entities_have_no_influence_whatever_they_hold(path, pooling, grad):
    """Causal pooling counts positions: padding at the end, where no real entity sees it."""
    layer = SwarmLayer(2, 4, 3, 3, pooling=pooling)
    x, mask = sets(dtype=torch.float32)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    with torch.enable_grad():
        params_need_grad = grad
        for p in layer.parameters():
            p.requires_grad_(params_need_grad)
        assert_masked_no_influence(layer, x, mask)
    xn = x.masked_fill(~mask.unsqueeze(-1), float("nan")).requires_grad_()
    layer.requires_grad_(True)
    layer(xn, mask)[mask].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters()), "a NaN in padding reached a gradient"
    assert torch.isfinite(xn.grad).all() and (xn.grad[~mask] == 0).all()


def test_factory_kwargs_and_repr():
    assert_factory_kwargs(SwarmLayer, 2, 4, 3, 2)
    assert_factory_kwargs(SwarmCell, 2, 4)
    assert_factory_kwargs(SetLinear, 2, 4)
    for block, args in ((MAB, (8, 2)), (SAB, (8, 2)), (ISAB, (8, 3, 2)), (PMA, (8, 1, 2))):  # attention blocks
        assert_factory_kwargs(block, *args)
    layer = SwarmLayer(2, 4, 3, 5, pooling="causal", dropout=0.25, dtype=torch.float64)
    assert layer(torch.randn(1, 3, 2, dtype=torch.float64)).dtype == torch.float64
    assert "dim_in=2, dim_hidden=4, dim_out=3, n_iter=5, pooling='causal', dropout=0.25" in repr(layer)
    assert "dim_in=2, dim_out=4, pooling='max'" in repr(SetLinear(2, 4, "max"))


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:FutureWarning")
def test_jit_trace_is_refused_with_a_message(path):
    layer = SwarmLayer(2, 4, 3, 2)
    with pytest.raises(RuntimeError, match="torch.jit.trace.*torch.export"):
        torch.jit.trace(layer, (torch.randn(2, 4, 2),))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_pickle_deepcopy_state_dict_empty_and_non_contiguous_inputs_keep_working(path, pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 4, 3, 2, pooling=pooling)
    x, mask = sets(dtype=torch.float32)
    want = layer(x, mask)
    for other in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        torch.testing.assert_close(other(x, mask), want)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    fresh = SwarmLayer(2, 4, 3, 2, pooling=pooling)
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    torch.testing.assert_close(fresh(x, mask), want)
    assert layer(torch.randn(0, 4, 2)).shape == (0, 4, 3)
    assert layer(torch.randn(2, 0, 2), torch.ones(2, 0, dtype=torch.bool)).shape == (2, 0, 3)
    wide = torch.randn(4, 2, 2).transpose(0, 1)  # (2, 4, 2), not contiguous
    torch.testing.assert_close(layer(wide), layer(wide.contiguous()))
    half = copy.deepcopy(layer).to(torch.bfloat16)
    torch.testing.assert_close(half(x.to(torch.bfloat16), mask).float(), want, atol=0.05, rtol=0.05)


@pytest.mark.slow  # compiles
@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_compiled_step_has_first_derivatives_and_refuses_second_ones(pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    layer.compile_step()
    x, mask = sets()
    xg = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda v: layer(v, mask), (xg,))
    with pytest.raises(RuntimeError, match="first derivatives only"):  # said in the layer's words
        torch.autograd.grad(layer(xg, mask).sum(), xg, create_graph=True)


@pytest.mark.slow  # compiles and exports
@pytest.mark.parametrize("pooling", POOLINGS)
def test_compile_fullgraph_and_export_keep_working(pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 4, 3, 2, pooling=pooling)
    x, mask = sets(dtype=torch.float32)
    want = layer(x, mask)
    torch.testing.assert_close(torch.compile(layer, fullgraph=True)(x, mask), want)
    exported = torch.export.export(layer, (x, mask))
    torch.testing.assert_close(exported.module()(x, mask), want)


def test_the_cell_and_the_chunked_forward_refuse_a_wrong_width_naming_both_shapes(path):
    """The fused kernels take the input width from the input itself: one wrong width must not give a number
    (the chunked forward of `cluster` on large sets and a cell stepped by hand reach them without the layer's
    entry check)."""
    cell, layer = SwarmCell(2, 4), SwarmLayer(2, 4, 3, 2).eval()
    h, c, pooled = torch.randn(3, 5, 4), torch.randn(3, 5, 4), torch.randn(3, 1, 4)
    with torch.no_grad():
        for bad in (torch.randn(3, 5, 3), torch.randn(3, 5, 1)):
            for state in ((None, None, None), (h, c, pooled)):
                shapes = re.escape("(..., 2)") + ".*got " + re.escape(str(tuple(bad.shape)))
                with pytest.raises(ValueError, match=shapes):
                    cell.step(*state, x=bad)
        for state in ((None, None, None), (h, c, pooled)):
            with pytest.raises(ValueError, match=r"projection x_proj of shape \(\.\.\., 16\), got \(3, 5, 12\)"):
                cell.step(*state, x_proj=torch.randn(3, 5, 12))
        for bad in (torch.randn(7, 3), torch.randn(7, 1), torch.randn(1, 7, 2)):
            with pytest.raises(ValueError, match=r"one set \(N, 2\)"):
                layer.forward_chunked(bad, 4)


def test_a_pooled_state_shared_by_the_sets_of_a_batch_steps_the_same_on_every_path(path):
    """``pooled`` broadcasts against the states as in PyTorch ops: one (1, N, H) for every set of a batch."""
    torch.manual_seed(0)
    cell = SwarmCell(2, 4)
    x, h, c = torch.randn(3, 5, 2), torch.randn(3, 5, 4), torch.randn(3, 5, 4)
    for pooled in (torch.randn(1, 5, 4), torch.randn(1, 1, 4), torch.randn(5, 4)):
        with torch.no_grad():
            got = cell.step(h, c, pooled, x=x)
        want = cell.step(h, c, pooled.expand(3, *pooled.shape[-2:]).clone().requires_grad_(), x=x)  # PyTorch ops
        torch.testing.assert_close(got, tuple(t.detach() for t in want))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_a_non_contiguous_mask_gives_the_same_outputs_and_gradients(path, pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 4, 3, 3, pooling=pooling)
    x, mask = sets(dtype=torch.float32)
    column_major = mask.t().contiguous().t()
    outs = []
    for m in (mask, column_major):
        xg = x.clone().requires_grad_()
        out = layer(xg, m)
        outs.append((out, *torch.autograd.grad(out.sin().sum(), [xg, *layer.parameters()])))
    torch.testing.assert_close(outs[1], outs[0])


@pytest.mark.parametrize("pooling", POOLINGS)
def test_layer_inside_a_transform_that_does_not_trace_it(path, pooling):
    """A frozen layer inside torch.func.grad and vmap of something else: its own tensors are constants there,
    and the layer gives the same numbers as outside the transform."""
    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    x, _ = sets()
    sab = SAB(layer(x).shape[-1], 1).double()
    want = sab(layer(x))
    scale = torch.tensor(2.0, dtype=torch.float64)
    torch.testing.assert_close(torch.func.grad(lambda s: (sab(layer(x)) * s).sum())(scale), want.sum())
    torch.testing.assert_close(torch.func.vmap(lambda s: sab(layer(x)) * s)(scale.expand(2))[1], 2 * want)


@pytest.mark.filterwarnings("ignore:`torch.jit.script:FutureWarning")  # PyTorch's forward-AD decompositions
@pytest.mark.parametrize("pooling", POOLINGS)
def test_forward_mode_derivatives_are_right(path, pooling):
    """Dual numbers (``torch.autograd.forward_ad``) with and without gradients: the tangent is the Jacobian-vector
    product of the reference, never dropped (a dropped tangent reads as zero)."""
    import torch.autograd.forward_ad as fwAD

    from swarmctl.testing import reference_swarm_states

    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    x, mask = sets()
    tangent = torch.randn_like(x)

    def reference(v):
        h, c = reference_swarm_states(layer, torch.where(mask[..., None], v, 0), mask if pooling == "mean" else None)
        return layer.output(torch.cat([h, c], -1))

    _, want = torch.func.jvp(reference, (x,), (tangent,))
    for grad, params in ((True, True), (False, True), (True, False)):
        layer.requires_grad_(params)
        with torch.set_grad_enabled(grad), fwAD.dual_level():
            got = fwAD.unpack_dual(layer(fwAD.make_dual(x, tangent), mask)).tangent
        assert got is not None, f"the tangent was dropped (grad mode {grad}, parameters need grad {params})"
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_batched_gradients_are_right(path, pooling):
    """``autograd.grad(..., is_grads_batched=True)`` (vmap over the backward, as ``jacrev`` of a loss does)."""
    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    x, mask = sets()
    xg = x.clone().requires_grad_()
    out = layer(xg, mask)
    probes = torch.randn(3, *out.shape, dtype=out.dtype)
    got = torch.autograd.grad(out, [xg, *layer.parameters()], probes, is_grads_batched=True, retain_graph=True)
    for k, probe in enumerate(probes):
        want = torch.autograd.grad(out, [xg, *layer.parameters()], probe, retain_graph=True)
        torch.testing.assert_close([g[k] for g in got], list(want))


class _SinWithUndifferentiableBackward(torch.autograd.Function):
    """sin, whose backward detaches cos(x): right first derivatives, second derivatives of zero."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos().detach()


class _Broken(torch.nn.Module):
    """A set model that breaks each module contract: padding reaches its parameters' gradients (its output
    hides it), any width is taken, second derivatives are wrong, device=/dtype= are ignored."""

    def __init__(self, dim=2, device=None, dtype=None):
        super().__init__()
        self.lin = torch.nn.Linear(dim, dim)

    def forward(self, x, mask):
        y = self.lin(x[..., :2] if x.shape[-1] >= 2 else x.expand(*x.shape[:-1], 2))
        return torch.where(mask.unsqueeze(-1), _SinWithUndifferentiableBackward.apply(y), 0.0)


def test_the_module_checks_fail_on_a_module_that_breaks_their_contracts():
    x, mask = sets()
    broken = _Broken().double()
    with pytest.raises(AssertionError, match="holding nan reached the gradient"):
        assert_masked_no_influence(broken, x, mask)
    assert_masked_no_influence(broken, x, mask, grads=False)  # its outputs alone keep the promise
    with pytest.raises(AssertionError, match="gave a result"):
        assert_rejects_bad_shapes(broken, x, mask)
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):  # gradgradcheck: the first derivatives are right
        assert_twice_differentiable(broken, x[:, :2], mask[:, :2])
    with pytest.raises(AssertionError, match="ignores device=/dtype="):
        assert_factory_kwargs(_Broken, 2)

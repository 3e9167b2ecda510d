"""SwarmLayer's module contracts on a card, against the CPU (`pytest -m gpu`, skipped without CUDA): the same
outputs, first and second derivatives in float64 on the PyTorch path and the Triton cell's first ones, the
factory keyword arguments, masked entities without influence, torch.func, and CPU/CUDA parity of every set
model's forward."""

import copy

import pytest
import torch

from swarmctl.layers.swarm import SwarmLayer, triton_cell
from swarmctl.testing import (
    assert_factory_kwargs,
    assert_masked_no_influence,
    assert_twice_differentiable,
    random_sets,
)

pytestmark = pytest.mark.gpu
POOLINGS = ["mean", "causal"]


def padded(dtype=torch.float64, device="cuda"):
    x, _ = random_sets(3, 6, 2, dtype=dtype, generator=torch.Generator().manual_seed(0))
    mask = torch.arange(6).expand(3, 6) < torch.tensor([[6], [4], [1]])
    return x.to(device), mask.to(device)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_cuda_outputs_and_second_derivatives_equal_the_cpus(pooling):
    torch.manual_seed(0)
    layer = SwarmLayer(2, 4, 3, 3, pooling=pooling).double()
    x, mask = padded(device="cpu")

    def hvp(module, v, m):
        v = v.clone().requires_grad_()
        out = module(v, m)
        g, = torch.autograd.grad(out.sin().sum(), v, create_graph=True)
        return [out, g, *torch.autograd.grad(g.square().sum(), [v, *module.parameters()], allow_unused=True)]

    cpu = hvp(layer, x, mask)
    cuda = hvp(copy.deepcopy(layer).cuda(), x.cuda(), mask.cuda())
    for a, b in zip(cpu, cuda, strict=True):
        if a is None or b is None:
            assert a is None and b is None
            continue
        torch.testing.assert_close(b.cpu(), a, atol=1e-10, rtol=1e-8)
    assert_twice_differentiable(copy.deepcopy(layer).cuda(), x[:, :3].cuda(), mask[:, :3].cuda(), params=False)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_triton_cell_has_right_first_derivatives_and_refuses_second_ones(pooling):
    pytest.importorskip("triton")
    torch.manual_seed(0)
    layer = SwarmLayer(2, 3, 2, 2, pooling=pooling).double().cuda()
    x = torch.randn(2, 3, 2, dtype=torch.float64, device="cuda", requires_grad=True)
    with triton_cell():
        assert torch.autograd.gradcheck(layer, (x,))
        out = layer(x).sin().sum()
        with pytest.raises(RuntimeError, match="no second derivatives"):
            torch.autograd.grad(out, x, create_graph=True)


@pytest.mark.parametrize("triton", [False, True])
@pytest.mark.parametrize("pooling", POOLINGS)
def test_masked_entities_have_no_influence_on_the_card(pooling, triton):
    if triton:
        pytest.importorskip("triton")
    layer = SwarmLayer(2, 8, 3, 3, pooling=pooling, device="cuda")
    x, mask = padded(torch.float32)
    with triton_cell(triton):
        assert_masked_no_influence(layer, x, mask)


def test_factory_kwargs_and_torch_func_on_the_card():
    assert_factory_kwargs(SwarmLayer, 2, 4, 3, 2)
    layer = SwarmLayer(2, 4, 3, 2, device="cuda", dtype=torch.float64)
    assert all(p.is_cuda and p.dtype == torch.float64 for p in layer.parameters())
    x, _ = padded()
    torch.testing.assert_close(torch.func.vmap(layer)(x), layer(x))


@pytest.mark.parametrize("name", ["swarm", "set-linear", "set-transformer", "lstm", "swarm-mog", "set-transformer-mog"])
def test_set_models_give_the_same_outputs_on_the_card_as_on_the_cpu(name):
    from swarmctl import ModelConfig, create_model
    from swarmctl.models import complete_config

    torch.manual_seed(0)
    cfg = {"dim_hidden": 8, "n_iter": 3, "n_inducing": 3, "n_heads": 2, "n_layers": 1}
    model = create_model(complete_config(ModelConfig(name=name, **cfg))).double().eval()
    x, mask = padded(device="cpu")
    want = model(x, mask)
    got = copy.deepcopy(model).cuda()(x.cuda(), mask.cuda())
    torch.testing.assert_close(got.cpu(), want, atol=1e-9, rtol=1e-7)

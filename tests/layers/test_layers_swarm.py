"""The SWARM layer against the reference formulation (``swarmctl.testing``), and its contracts."""

import pytest
import torch

from swarmctl.layers.swarm import SwarmLayer
from swarmctl.testing import (
    assert_causal,
    assert_padding_invariant,
    assert_permutation_equivariant,
    random_sets,
    reference_swarm_states,
)


@pytest.mark.parametrize("pooling", ["mean", "causal"])
def test_swarm_layer_matches_reference_formulation(pooling):
    layer = SwarmLayer(3, 6, 4, n_iter=4, pooling=pooling).double()
    x, mask = random_sets(3, 7, 3, dtype=torch.float64)
    if pooling == "causal":
        mask = torch.ones_like(mask)
    with torch.no_grad():
        got = layer(x, mask)
        want = layer.output(torch.cat(reference_swarm_states(layer, x, mask), -1))
    torch.testing.assert_close(got[mask], want[mask], atol=1e-6, rtol=0)


def test_swarm_layer_parameter_count_formula():
    H, D_in, D_out = 192, 2, 10
    layer = SwarmLayer(D_in, H, D_out, n_iter=10)
    assert sum(p.numel() for p in layer.parameters()) == 4 * H * (D_in + 1) + 8 * H * H + (2 * H + 1) * D_out


def test_swarm_layer_only_input_projection_has_gate_bias():
    layer = SwarmLayer(2, 8, 3, n_iter=2)
    assert layer.cell.input.bias is not None
    assert layer.cell.recurrent.bias is None and layer.cell.population.bias is None


def test_swarm_layer_mean_pooling_is_equivariant_and_padding_invariant():
    layer = SwarmLayer(2, 16, 5, n_iter=5).double()
    x, mask = random_sets(4, 12, 2, dtype=torch.float64)
    assert_permutation_equivariant(layer, x, mask, atol=1e-10)
    assert_padding_invariant(layer, x, mask, atol=1e-10)


def test_swarm_layer_single_iteration_is_entitywise():
    layer = SwarmLayer(2, 8, 3, n_iter=1).double()
    x = torch.randn(1, 6, 2, dtype=torch.float64)
    full = layer(x, None)
    alone = torch.cat([layer(x[:, i : i + 1], None) for i in range(6)], 1)
    torch.testing.assert_close(full, alone)


def test_swarm_layer_causal_pooling_is_causal():
    layer = SwarmLayer(3, 8, 4, n_iter=3, pooling="causal").double()
    assert layer.symmetry == "causal" and SwarmLayer(3, 8, 4, n_iter=3).symmetry == "equivariant"
    x = torch.randn(1, 9, 3, dtype=torch.float64)
    assert_causal(lambda v: layer(v), x)


def test_assert_causal_detects_a_non_causal_function():
    layer = SwarmLayer(3, 8, 4, n_iter=3, pooling="mean").double()
    x = torch.randn(1, 6, 3, dtype=torch.float64)
    with pytest.raises(AssertionError, match="later input"):
        assert_causal(lambda v: layer(v), x, positions=[2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_swarm_layer_runs_in_dtype(dtype):
    layer = SwarmLayer(2, 8, 3, n_iter=3).to(dtype)
    x, mask = random_sets(2, 5, 2, dtype=dtype)
    y = layer(x, mask)
    assert y.dtype == dtype and y.shape == (2, 5, 3) and torch.isfinite(y).all()


def test_swarm_layer_handles_large_and_single_entity_sets():
    layer = SwarmLayer(2, 4, 3, n_iter=2)
    assert layer(torch.randn(1, 1, 2)).shape == (1, 1, 3)
    assert layer(torch.randn(1, 3000, 2)).shape == (1, 3000, 3)


def test_swarm_layer_dropout_zeroes_whole_units_only_in_training():
    layer = SwarmLayer(2, 64, 3, n_iter=2, dropout=0.5)
    x = torch.randn(2, 10, 2)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))
    layer.train()
    h, _ = layer.states(x)
    zero_units = (h == 0).all(dim=1)  # (B, H): a dropped unit is zero for every entity of its set
    assert zero_units.any()
    assert ((h == 0).sum(1) % 10 == 0).all()


@pytest.mark.slow
def test_swarm_layer_compiled_step_matches_eager():
    layer = SwarmLayer(2, 16, 3, n_iter=4)
    x, mask = random_sets(3, 11, 2)
    want, keys = layer(x, mask), list(layer.state_dict())
    layer.compile_step()
    torch.testing.assert_close(layer(x, mask), want, atol=1e-5, rtol=1e-5)
    assert list(layer.state_dict()) == keys  # the compiled step adds nothing to the state dict


@pytest.mark.parametrize("p_entities", [1, 3])
def test_fused_pointwise_matches_autograd_reference(p_entities):
    """First and second derivatives of all four outputs (h, c', the activated gates and tanh(c'), which the
    double backward differentiates through); the pooled input broadcast over the entities or one per entity.
    (The operation is pointwise: one set of three entities holds every case; the checks take one pass per
    input number.)"""
    from swarmctl.layers._fused import FusedLSTMPointwise, fused_lstm_pointwise
    from swarmctl.layers.swarm import lstm_pointwise

    a = torch.randn(1, 3, 16, dtype=torch.float64, requires_grad=True)
    p = torch.randn(1, p_entities, 16, dtype=torch.float64, requires_grad=True)
    c = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(FusedLSTMPointwise.apply, (a, p, c))
    assert torch.autograd.gradgradcheck(FusedLSTMPointwise.apply, (a, p, c))
    h1, c1 = fused_lstm_pointwise(a, p, c)
    h2, c2 = lstm_pointwise(a + p, c)
    torch.testing.assert_close((h1, c1), (h2, c2))

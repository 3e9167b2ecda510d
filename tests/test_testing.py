"""The contract checks of ``swarmctl.testing`` fail on models that break their contract: every
equivariance, invariance and padding test of the suite relies on them, so a check that always
passes would make those tests pass for nothing. Each check is run on a set function that keeps the
contract (it passes), on plain functions that break it in one way each, and on registered models
used the wrong way (causal pooling, an order-dependent LSTM, the mask dropped)."""

import pytest
import torch

from swarmctl.config import ModelConfig
from swarmctl.layers.pooling import masked_mean
from swarmctl.models import create_model
from swarmctl.testing import (
    assert_padding_invariant,
    assert_permutation_equivariant,
    assert_permutation_invariant,
    random_sets,
)


@pytest.fixture
def sets():
    return random_sets(4, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _positions(x):
    return torch.arange(x.shape[1], dtype=x.dtype).view(1, -1, 1)


def model(name, **kw):
    return create_model(ModelConfig(name=name, dim_in=3, dim_out=2, **kw)).double().eval()


# ---- permutation equivariance ---------------------------------------------------------------------

def test_equivariance_passes_an_equivariant_function(sets):
    assert_permutation_equivariant(lambda x, m: 2 * x + masked_mean(x, m).unsqueeze(1), *sets)
    assert_permutation_equivariant(model("swarm", dim_hidden=6, n_iter=2), *sets)


EQUIVARIANCE_BREAKERS = {
    "running-sum": lambda x, m: x.cumsum(1),
    "position-added": lambda x, m: x + _positions(x),
    "tiny-position-term": lambda x, m: x + 1e-4 * _positions(x),  # above the 1e-6 tolerance
    "first-entity-broadcast": lambda x, m: x[:, :1].expand_as(x),
    "reversed": lambda x, m: x.flip(1),
}


@pytest.mark.parametrize("fn", EQUIVARIANCE_BREAKERS.values(), ids=EQUIVARIANCE_BREAKERS.keys())
def test_equivariance_fails_a_function_that_is_not(fn, sets):
    with pytest.raises(AssertionError, match="not permutation-equivariant"):
        assert_permutation_equivariant(fn, *sets)


@pytest.mark.parametrize(("name", "kw"), [("swarm", {"pooling": "causal", "dim_hidden": 6, "n_iter": 2}),
                                          ("lstm", {"dim_hidden": 6})])
def test_equivariance_fails_an_order_dependent_model(name, kw, sets):
    with pytest.raises(AssertionError, match="not permutation-equivariant"):
        assert_permutation_equivariant(model(name, **kw), *sets)


# ---- padding invariance ---------------------------------------------------------------------------

def test_padding_invariance_passes_a_masked_function(sets):
    assert_padding_invariant(lambda x, m: x + masked_mean(x, m).unsqueeze(1), *sets)
    assert_padding_invariant(model("set-linear", dim_hidden=6, n_layers=2), *sets)


PADDING_BREAKERS = {
    "mean-over-padding-too": lambda x, m: x + x.mean(1, keepdim=True),
    "depends-on-padded-length": lambda x, m: x * x.shape[1],
    "max-over-padding-too": lambda x, m: x + x.amax(1, keepdim=True),
}


@pytest.mark.parametrize("fn", PADDING_BREAKERS.values(), ids=PADDING_BREAKERS.keys())
def test_padding_invariance_fails_a_function_that_sees_padding(fn, sets):
    with pytest.raises(AssertionError, match="padding changed real outputs"):
        assert_padding_invariant(fn, *sets)


def test_padding_invariance_fails_a_model_whose_mask_is_dropped(sets):
    net = model("set-linear", dim_hidden=6, n_layers=2)
    with pytest.raises(AssertionError, match="padding changed real outputs"):
        assert_padding_invariant(lambda x, m: net(x, None), *sets)


# ---- permutation invariance -----------------------------------------------------------------------

def _masked_sum(x, m):
    return (x * m.unsqueeze(-1)).sum(1)


def _mog(pooling):
    """The MoG SWARM model (2-d points in, one mixture per set out): invariant with mean pooling."""
    return create_model(ModelConfig(name="swarm-mog", dim_hidden=6, n_iter=2, pooling=pooling)).double().eval()


def test_invariance_passes_an_invariant_function(sets):
    assert_permutation_invariant(_masked_sum, *sets)
    assert_permutation_invariant(_mog("mean"), sets[0][..., :2], sets[1])


INVARIANCE_BREAKERS = {
    "first-entity": lambda x, m: x[:, 0],
    "weighted-by-position": lambda x, m: (x * m.unsqueeze(-1) * _positions(x)).sum(1),
    "last-real-entity": lambda x, m: x[torch.arange(len(x)), m.sum(1) - 1],
}


@pytest.mark.parametrize("fn", INVARIANCE_BREAKERS.values(), ids=INVARIANCE_BREAKERS.keys())
def test_invariance_fails_a_function_that_is_not(fn, sets):
    with pytest.raises(AssertionError, match="not permutation-invariant"):
        assert_permutation_invariant(fn, *sets)


def test_invariance_fails_the_order_dependent_mog_model(sets):
    with pytest.raises(AssertionError, match="not permutation-invariant"):
        assert_permutation_invariant(_mog("causal"), sets[0][..., :2], sets[1])

"""The SWARM model with a count head (swarmctl.models.swarm_count): its second output is a
distribution over the number of clusters, one per set, unchanged by the order of the points and by whatever
the padding holds; its cluster logits are the SWARM's."""

import torch

from swarmctl import ModelConfig, count_parameters, create_model
from swarmctl.testing import random_sets


def _model(**cfg) -> torch.nn.Module:
    torch.manual_seed(0)
    return create_model(ModelConfig(name="swarm-count", dim_hidden=8, n_iter=3, dim_out=6, **cfg)).double().eval()


def _sets(batch=3, size=11):
    return random_sets(batch, size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_count_is_a_distribution_over_k_per_set():
    x, mask = _sets()
    p = _model().count_distribution(x, mask)
    assert p.shape == (3, 6)
    assert (p >= 0).all() and torch.allclose(p.sum(-1), torch.ones(3, dtype=torch.float64))


def test_count_is_permutation_invariant():
    model = _model()
    x, mask = _sets()
    x, mask = x[:, :9], torch.ones(3, 9, dtype=torch.bool)  # all real, so any order is a valid set
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(2))
    _, before = model.forward_with_count(x, mask)
    _, after = model.forward_with_count(x[:, perm], mask)
    torch.testing.assert_close(after, before, atol=1e-10, rtol=1e-9)
    assert model.forward_with_count(x + 1.0, mask)[1].sub(before).abs().max() > 1e-6  # it does read the points


def test_masked_entities_have_no_influence_on_the_count():
    model = _model()
    x, mask = _sets()
    pad = torch.full((3, 4, 2), float("nan"), dtype=torch.float64)
    pad[1] = 1e6
    _, padded = model.forward_with_count(torch.cat([x, pad], 1), torch.cat([mask, mask.new_zeros(3, 4)], 1))
    torch.testing.assert_close(padded, model.forward_with_count(x, mask)[1], atol=1e-10, rtol=1e-9)


def test_cluster_logits_are_the_forward_pass():
    model = _model(n_layers=2)
    x, mask = _sets()
    logits, _ = model.forward_with_count(x, mask)
    torch.testing.assert_close(logits[mask], model(x, mask)[mask])


def test_the_head_adds_parameters_to_the_swarm_and_changes_none_of_its():
    plain = create_model(ModelConfig(name="swarm", dim_hidden=192, n_iter=10, n_layers=1, dim_out=16))
    counting = create_model(ModelConfig(name="swarm-count", dim_hidden=192, n_iter=10, n_layers=1, dim_out=16))
    assert count_parameters(plain) == 303_376  # the shipped broad model's
    head = (2 * 192 + 16) * 192 + 192 + 192 * 16 + 16
    assert count_parameters(counting) == 303_376 + head
    shapes = {k: v.shape for k, v in counting.state_dict().items() if not k.startswith("count.")}
    assert shapes == {k: v.shape for k, v in plain.state_dict().items()}  # the broad model's weights load as they are

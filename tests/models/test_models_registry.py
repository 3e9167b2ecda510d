"""Generic contract tests, parametrized over every registered model."""

import io

import pytest
import torch

from swarmctl import ModelConfig, count_parameters, create_model, list_models
from swarmctl.errors import ConfigError
from swarmctl.models import complete_config, get_spec, paper_code
from swarmctl.models.registry import SYMMETRIES
from swarmctl.testing import (
    assert_padding_invariant,
    assert_permutation_equivariant,
    assert_permutation_invariant,
    order_dependence,
    random_sets,
)

CLUSTERING = list_models("clustering")
MOG = list_models("mog")
SETS = CLUSTERING + MOG  # models over sets: (x, mask) in; image models are tested in test_models_image.py

TINY = {"dim_hidden": 8, "n_iter": 3, "n_layers": 2, "n_inducing": 3, "n_heads": 2}


def tiny(name: str, **overrides) -> torch.nn.Module:
    # clustering models are tested with 2 layers; MoG models keep their own number (the SWARM ones have one)
    layers = 2 if name in CLUSTERING else complete_config(ModelConfig(name=name)).n_layers
    cfg = {**TINY, "n_layers": layers, **overrides}
    return create_model(ModelConfig(name=name, **cfg))


def output_shape(name: str, B: int, N: int) -> tuple[int, ...]:
    return (B, 4, 5) if name in MOG else (B, N, 10)


def real(name: str, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The outputs that padding must not touch: real entities' rows, or the whole set-level output."""
    return y if name in MOG else y[mask]


def test_every_model_belongs_to_a_task():
    assert sorted(SETS + list_models("image")) == list_models()


@pytest.mark.parametrize("name", list_models())
def test_every_model_declares_one_symmetry(name):
    assert create_model(ModelConfig(name=name)).symmetry in SYMMETRIES


@pytest.mark.parametrize("name", SETS)
def test_model_builds_from_default_config(name):
    model = create_model(ModelConfig(name=name))
    x, mask = random_sets(2, 7)
    assert model(x, mask).shape == output_shape(name, 2, 7)


@pytest.mark.parametrize("name", SETS)
def test_model_forward_shape_finite_and_all_parameters_get_gradients(name):
    model = tiny(name)
    x, mask = random_sets(3, 9)
    y = model(x, mask)
    assert y.shape == output_shape(name, 3, 9) and torch.isfinite(y).all()
    real(name, y, mask).square().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient for {missing}"


@pytest.mark.parametrize("name", CLUSTERING)
def test_model_is_equivariant_or_measurably_order_dependent(name):
    model = tiny(name).double().eval()
    x, mask = random_sets(3, 12, dtype=torch.float64)
    assert model.symmetry in ("equivariant", "causal", "order-dependent")
    if model.symmetry == "equivariant":
        assert_permutation_equivariant(model, x, mask, atol=1e-9)
    else:
        assert order_dependence(model, x, mask) > 1e-4


@pytest.mark.parametrize("name", MOG)
def test_mog_model_is_invariant_or_measurably_order_dependent(name):
    for pooling in ("mean", "causal") if "pooling" in get_spec(name).defaults else (None,):
        model = tiny(name, pooling=pooling).double().eval()
        x, mask = random_sets(3, 12, dtype=torch.float64)
        assert model.symmetry in ("invariant", "order-dependent")
        if model.symmetry == "invariant":
            assert_permutation_invariant(model, x, mask, atol=1e-9)
        else:
            out = model(x, None)
            perm = torch.randperm(12)
            assert (model(x[:, perm], None) - out).abs().max() > 1e-4


@pytest.mark.parametrize("name", SETS)
def test_model_ignores_masked_padding(name):
    model = tiny(name).double().eval()
    x, mask = random_sets(3, 10, dtype=torch.float64)
    if name in MOG:
        pad = torch.randn(3, 4, 2, dtype=torch.float64) * 10
        got = model(torch.cat([x, pad], 1), torch.cat([mask, mask.new_zeros(3, 4)], 1))
        torch.testing.assert_close(got, model(x, mask), atol=1e-9, rtol=1e-7)
    else:
        assert_padding_invariant(model, x, mask, atol=1e-9)


@pytest.mark.parametrize("name", SETS)
def test_model_state_dict_round_trip(name):
    model = tiny(name).eval()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(123)
    other = tiny(name).eval()
    other.load_state_dict(torch.load(buf, weights_only=True))
    x, mask = random_sets(2, 6)
    torch.testing.assert_close(other(x, mask), model(x, mask))


@pytest.mark.parametrize(
    ("name", "overrides", "count", "code"),
    [
        ("swarm", {"dim_hidden": 192, "n_iter": 10, "n_layers": 1}, 301_066, "192-10-1"),
        ("swarm", {"dim_hidden": 128, "n_iter": 10, "n_layers": 1}, 135_178, "128-10-1"),
        ("set-transformer", {"dim_hidden": 32, "n_inducing": 60, "n_layers": 3}, 57_642, "32-60-3"),
        ("lstm", {"dim_hidden": 128, "n_layers": 3}, 928_266, "128-3"),
        ("lstm-sorted", {"dim_hidden": 64, "n_layers": 3}, 234_762, "64-3"),
        ("set-linear", {"dim_hidden": 64, "n_layers": 6}, 34_964, "64-6"),
        ("set-linear-max", {"dim_hidden": 96, "n_layers": 6}, 77_012, "96-6"),
        ("swarm-mog", {"dim_hidden": 768, "n_iter": 20}, 4_758_548, "768-20-1"),
        ("swarm-mog", {"dim_hidden": 256, "n_iter": 10}, 537_620, "256-10-1"),
        ("swarm-mog", {"dim_hidden": 512, "n_iter": 10}, 2_123_796, "512-10-1"),
        ("swarm-mog-pma", {"dim_hidden": 256, "n_iter": 10}, 769_940, "256-10-1"),
        ("swarm-mog-pma", {"dim_hidden": 512, "n_iter": 20}, 2_411_412, "512-20-1"),
        ("swarm-mog-pma", {"dim_hidden": 768, "n_iter": 20}, 5_101_460, "768-20-1"),
    ],
)
def test_parameter_counts_match_protocol(name, overrides, count, code):
    cfg = ModelConfig(name=name, **overrides)
    assert count_parameters(create_model(cfg)) == count
    assert paper_code(cfg) == code


def test_defaults_are_the_papers_best_codes():
    assert paper_code(ModelConfig(name="swarm")) == "192-10-1"
    assert paper_code(ModelConfig(name="set-transformer")) == "32-60-3"
    assert complete_config(ModelConfig(name="lstm")).dim_hidden == 128


def test_multilayer_swarm_has_one_layer_per_requested_layer():
    model = create_model(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=3))
    assert len(model.layers) == 3
    assert model.layers[0].output.out_features == 8 and model.layers[-1].output.out_features == 10


def test_unknown_model_lists_the_names():
    with pytest.raises(ConfigError, match="choose one of: .*swarm"):
        create_model(ModelConfig(name="nope"))


@pytest.mark.parametrize("field", ["n_iter", "dim_hidden", "n_layers"])
def test_out_of_range_hyper_parameters_are_config_errors(field):
    with pytest.raises(ConfigError, match=field):
        ModelConfig(name="swarm", **{field: 0})


def test_heads_must_divide_hidden():
    with pytest.raises(ConfigError, match="heads"):
        create_model(ModelConfig(name="set-transformer", dim_hidden=30, n_heads=4))

"""Generic contract tests, parametrized over every registered model and read from the task registry: each
model's inputs come from its task (``Task.example_inputs``), and what is checked follows the model's
declared ``symmetry``, so a new model, or a model of a new task, is checked without changing this file."""

import contextlib
import io

import pytest
import torch

from swarmctl import ModelConfig, count_parameters, create_model, list_models
from swarmctl.errors import ConfigError
from swarmctl.models import complete_config, get_spec, paper_code
from swarmctl.models.registry import SYMMETRIES
from swarmctl.runs import parameter_count
from swarmctl.tasks import TASKS, task_of
from swarmctl.testing import (
    assert_masked_no_influence,
    assert_padding_invariant,
    assert_permutation_equivariant,
    assert_permutation_invariant,
    assert_rejects_bad_shapes,
    assert_twice_differentiable,
    order_dependence,
)

MODELS = list_models()
TINY = {"dim_hidden": 8, "n_iter": 3, "n_inducing": 3, "n_heads": 2}


def tiny(name: str, **overrides) -> torch.nn.Module:
    """A small model of ``name``: 2 layers where the model allows them, else its own number."""
    for layers in (2, None):
        cfg = {**TINY, "n_layers": layers, **overrides}
        try:
            return create_model(complete_config(ModelConfig(name=name, **cfg)))
        except ConfigError:
            if layers is None:
                raise
    raise AssertionError("unreachable")


def inputs(name: str, batch: int, size: int, dtype=torch.float32):
    return task_of(name).example_inputs(batch, size, dtype=dtype, generator=torch.Generator().manual_seed(0))


def takes_sets(name: str) -> bool:
    """The model's inputs are padded sets: (x, mask) with a boolean mask."""
    args = inputs(name, 2, 5)
    return len(args) == 2 and args[1].dtype == torch.bool


SET_MODELS = [n for n in MODELS if takes_sets(n)]


def test_every_model_belongs_to_a_registered_task():
    assert all(get_spec(name).task in TASKS for name in MODELS)
    assert sorted(n for t in TASKS for n in list_models(t)) == MODELS


@pytest.mark.parametrize("name", MODELS)
def test_every_model_declares_one_symmetry(name):
    assert create_model(ModelConfig(name=name)).symmetry in SYMMETRIES


@pytest.mark.parametrize("name", MODELS)
def test_model_forward_is_finite_per_input_and_all_parameters_get_gradients(name):
    model = tiny(name)
    args = inputs(name, 3, 9)
    y = model(*args)
    assert y.shape[0] == 3 and torch.isfinite(y).all()
    if model.symmetry == "equivariant":
        assert y.shape[1] == 9  # one output per entity
    loss = y.float().square().sum()
    if hasattr(model, "forward_with_count"):  # a count head: trained through the model's second output
        loss = loss + model.forward_with_count(*args)[1].float().square().sum()
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient for {missing}"


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_builds_from_default_config(name):
    model = create_model(ModelConfig(name=name))
    assert model(*inputs(name, 2, 7)).shape[0] == 2


def order_effect(model, x, mask) -> float:
    """How much reordering the set changes the output: per entity when the model gives one output per
    entity, else the whole output (sets made full, so that every entity takes part)."""
    if model(x, mask).shape[:2] == mask.shape:
        return order_dependence(model, x, mask)
    full = torch.ones_like(mask)
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(1))
    return (model(x[:, perm], full) - model(x, full)).abs().max().item()


def poolings(name: str) -> list:
    """The model's own pooling, and causal pooling where the model has it."""
    if "pooling" not in get_spec(name).defaults:
        return [None]
    try:
        tiny(name, pooling="causal")
    except ConfigError:
        return [None]
    return [None, "causal"]


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_keeps_its_declared_symmetry(name):
    for pooling in poolings(name):
        model = tiny(name, pooling=pooling).double().eval()
        x, mask = inputs(name, 3, 12, dtype=torch.float64)
        if model.symmetry == "equivariant":
            assert_permutation_equivariant(model, x, mask, atol=1e-9)
        elif model.symmetry == "invariant":
            assert_permutation_invariant(model, x, mask, atol=1e-9)
        else:  # causal or order-dependent: the order must show
            assert order_effect(model, x, mask) > 1e-4, (name, pooling)


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_ignores_masked_padding(name):
    model = tiny(name).double().eval()
    x, mask = inputs(name, 3, 10, dtype=torch.float64)
    if model.symmetry == "invariant":  # one output per set: all of it must stay
        pad = torch.randn(3, 4, x.shape[-1], dtype=torch.float64) * 10
        got = model(torch.cat([x, pad], 1), torch.cat([mask, mask.new_zeros(3, 4)], 1))
        torch.testing.assert_close(got, model(x, mask), atol=1e-9, rtol=1e-7)
    else:
        assert_padding_invariant(model, x, mask, atol=1e-9)


@pytest.mark.parametrize("name", MODELS)
def test_model_state_dict_round_trip(name):
    model = tiny(name).eval()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(123)
    other = tiny(name).eval()
    other.load_state_dict(torch.load(buf, weights_only=True))
    args = inputs(name, 2, 6)
    torch.testing.assert_close(other(*args), model(*args))


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
    assert parameter_count(cfg) == count  # counted on the meta device, its initialisers skipped
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


def test_counting_parameters_leaves_the_weights_of_models_built_after_it_as_they_were():
    torch.manual_seed(0)
    before = create_model(ModelConfig(name="set-transformer", **TINY)).state_dict()
    parameter_count(ModelConfig(name="set-transformer", dim_hidden=32))
    torch.manual_seed(0)
    after = create_model(ModelConfig(name="set-transformer", **TINY)).state_dict()
    assert all(v.device.type == "cpu" for v in after.values())
    torch.testing.assert_close(after, before, rtol=0, atol=0)


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_refuses_a_wrong_input_width_or_mask_shape_naming_the_shapes(name):
    model = tiny(name).eval()
    x, mask = inputs(name, 2, 6)
    assert_rejects_bad_shapes(model, x, mask)


@pytest.mark.parametrize("name", SET_MODELS)
def test_masked_entities_holding_nan_or_inf_change_no_real_output(name):
    """Whatever padding holds, NaN and inf included, the real outputs stay those of zero padding (trailing
    padding: causal pooling counts positions)."""
    torch.manual_seed(0)
    model = tiny(name).eval()
    x, mask = inputs(name, 3, 8)
    mask = torch.arange(8).expand(3, 8) < torch.tensor([[8], [5], [2]])  # one full, two padded sets
    assert_masked_no_influence(model, x, mask)


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_takes_a_set_with_no_real_entity_and_an_empty_batch(name):
    """A batch may hold a set whose entities are all padding: the other sets' outputs and gradients stay what
    they are alone (finite); an empty batch gives an empty output."""
    torch.manual_seed(0)
    model = tiny(name).double().eval()
    x, mask = inputs(name, 3, 6, dtype=torch.float64)
    mask[2] = False
    alone = model(x[:2], mask[:2])
    xg = x.masked_fill(~mask.unsqueeze(-1), float("nan")).requires_grad_()
    out = model(xg, mask)
    torch.testing.assert_close(out[:2], alone)
    out[:2].sum().backward()
    # a parameter forward does not use (a count head's) has no gradient; every other one is finite
    assert torch.isfinite(xg.grad).all() and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                                 if p.grad is not None)
    assert model(x[:0], mask[:0]).shape == (0, *alone.shape[1:])


@pytest.mark.parametrize("name", SET_MODELS)
def test_set_model_has_right_second_derivatives_or_refuses_them_in_words(name):
    """gradgradcheck on the input; the attention models' fused attention kernel has first derivatives only:
    refused with a message naming the way to them (PyTorch's math attention), which then passes. Two outputs per
    entity where the task lets the model choose: the checks take a backward pass per output number."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = tiny(name, dim_out=2).double().eval()
    x, mask = inputs(name, 2, 3, dtype=torch.float64)
    attention = any(type(m).__name__ == "MultiheadAttention" for m in model.modules())
    if attention:
        xg = x.clone().requires_grad_()
        with pytest.raises(RuntimeError, match=r"first derivatives only.*sdpa_kernel.*SDPBackend.MATH"):
            torch.autograd.grad(model(xg, mask).sum(), xg, create_graph=True)
    with sdpa_kernel(SDPBackend.MATH) if attention else contextlib.nullcontext():
        assert_twice_differentiable(model, x, mask, params=False)

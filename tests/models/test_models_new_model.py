"""Adding a model to an existing task is one registration (docs/design.md, "Adding a model"): a toy clustering
model, defined and registered in this test alone, passes the generic checks of test_models_registry.py, is
listed by `swarmctl models`, trains and evaluates through the CLI, with no change to the package. A toy model
that breaks the symmetry it declares is caught by the same generic checks."""

import json

import pytest
import test_models_registry as generic
import torch
from torch import nn

from swarmctl.models import registry
from swarmctl.tasks import TASKS


class ToyDeepSet(nn.Module):
    """Per-entity logits from each point and the mean of the set: equivariant, padding ignored."""

    symmetry = "equivariant"

    def __init__(self, hidden: int, peek: bool = False):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(2, hidden), nn.Tanh())
        self.out = nn.Linear(2 * hidden, 10)
        self.peek = peek  # the broken variant: every entity also sees the first entity, so order matters

    def forward(self, x, mask):
        h = self.phi(x)
        weight = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * weight).sum(1, keepdim=True) / weight.sum(1, keepdim=True).clamp_min(1)
        if self.peek:
            pooled = pooled + h[:, :1]
        return self.out(torch.cat([h, pooled.expand_as(h)], -1))


@pytest.fixture
def toy_models(monkeypatch):
    """Steps 1-2 of the checklist, for this test only: the class above and its registration."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_model("toy-deepset", code=("dim_hidden",), defaults={"dim_hidden": 16}, task="clustering",
                            summary="toy DeepSets clustering model")(lambda cfg: ToyDeepSet(cfg.dim_hidden))
    registry.register_model("toy-broken", code=("dim_hidden",), defaults={"dim_hidden": 16}, task="clustering")(
        lambda cfg: ToyDeepSet(cfg.dim_hidden, peek=True))


def test_a_new_model_passes_the_generic_checks(toy_models):
    name = "toy-deepset"
    assert registry.get_spec(name).task in TASKS and name in registry.list_models("clustering")
    generic.test_every_model_declares_one_symmetry(name)
    generic.test_model_forward_is_finite_per_input_and_all_parameters_get_gradients(name)
    generic.test_set_model_builds_from_default_config(name)
    generic.test_set_model_keeps_its_declared_symmetry(name)
    generic.test_set_model_ignores_masked_padding(name)
    generic.test_model_state_dict_round_trip(name)


def test_the_generic_checks_catch_a_new_model_that_breaks_its_declared_symmetry(toy_models):
    with pytest.raises(AssertionError):
        generic.test_set_model_keeps_its_declared_symmetry("toy-broken")


def test_a_new_model_is_listed_trained_and_evaluated_through_the_cli(toy_models, cli, tiny_h5, tmp_path):
    r = cli("models")
    assert r.exit_code == 0 and "toy-deepset" in r.output, r.output
    runs = tmp_path / "runs"
    r = cli("train", "toy-deepset", "--hidden", 8, "--data", tiny_h5, "--batch-size", 6, "--max-epochs", 2,
            "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    run = runs / "toy-deepset-8-s0"
    assert json.loads((run / "config.json").read_text())["model"]["name"] == "toy-deepset"
    r = cli("eval", "toy-deepset-8-s0", "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    res = json.loads((run / "eval-val.json").read_text())
    assert res["model"] == "toy-deepset" and res["loss"] > 0


def test_the_toy_models_are_not_left_registered():
    assert not {"toy-deepset", "toy-broken"} & set(registry.list_models())

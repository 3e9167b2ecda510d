"""Every hyper-parameter option given to a model that does not read it is refused (exit 2, one line,
nothing written): a value the model would ignore, yet record in its config.json, is a mistake."""

import pytest
from conftest import tiered

from swarmctl.models import get_spec, list_models
from swarmctl.models.registry import OPTION_NAMES

VALUES = {"hidden": 8, "iters": 2, "layers": 1, "inducing": 4, "heads": 2, "pooling": "mean", "dropout": 0.1}
FOREIGN = [(model, OPTION_NAMES[f]) for model in list_models() for f in OPTION_NAMES
           if f not in get_spec(model).fields]


def test_some_model_lacks_some_option():
    assert ("lstm", "iters") in FOREIGN and ("lstm", "pooling") in FOREIGN


@pytest.mark.parametrize(("model", "option"), FOREIGN, ids=[f"{m}--{o}" for m, o in FOREIGN])
def test_an_option_the_model_does_not_have_is_refused(cli, tmp_path, model, option):
    runs = tmp_path / "runs"
    r = cli("train", model, f"--{option}", VALUES[option], "--runs-dir", runs, "--max-epochs", 1, "--device", "cpu")
    assert r.exit_code == 2, r.output
    assert f"has no --{option}" in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert list(tmp_path.iterdir()) == []


# swarm (every option but the attention ones) in the default suite; lstm (no --iters, no --pooling) slow
@pytest.mark.parametrize("model", [tiered("swarm", default=True), tiered("lstm", default=False)])
def test_the_options_a_model_has_are_accepted(cli, tmp_path, tiny_h5, model):
    own = [o for f, o in OPTION_NAMES.items() if f in get_spec(model).fields and o not in ("heads", "inducing")]
    args = [a for o in own for a in (f"--{o}", VALUES[o])]
    r = cli("train", model, *args, "--data", tiny_h5, "--runs-dir", tmp_path / "runs", "--max-epochs", 1,
            "--batch-size", 4, "--device", "cpu")
    assert r.exit_code == 0, r.output

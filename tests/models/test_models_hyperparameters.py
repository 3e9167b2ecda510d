"""The registry's one table of model hyper-parameters is what `train` offers and what a sweep grid takes: a
hyper-parameter in the table reaches both, and every ModelConfig field that users set has a row."""

import dataclasses
import json

import typer
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.config import ModelConfig
from swarmctl.models import HYPERPARAMETERS, get_spec
from swarmctl.studies.sweep import parse_spec

FIXED = {"name", "dim_in", "dim_out", "dataset"}  # the model's name, sizes from the data, the named dataset


def test_every_settable_model_config_field_has_one_row():
    settable = {f.name for f in dataclasses.fields(ModelConfig)} - FIXED
    rows = [h.field for h in HYPERPARAMETERS]
    assert sorted(rows) == sorted(settable) and len(set(h.option for h in HYPERPARAMETERS)) == len(rows)


def test_train_has_one_option_per_row_of_the_type_the_row_says():
    train = typer.main.get_command(app).commands["train"]
    options = {p.name: p for p in train.params}
    for h in HYPERPARAMETERS:
        assert options[h.option].opts == [f"--{h.option}"] and options[h.option].default is None  # the model's
        if h.type is not str:  # a word where a number belongs is refused before anything runs
            r = CliRunner().invoke(app, ["train", "swarm", f"--{h.option}", "many"])
            assert r.exit_code == 2 and "Invalid value" in r.output, r.output


def test_train_puts_every_option_of_the_table_into_the_config(tmp_path, tiny_h5):
    given = {"hidden": 6, "iters": 2, "layers": 2, "pooling": "causal", "dropout": 0.25}
    assert set(given) == {h.option for h in HYPERPARAMETERS if h.field in get_spec("swarm").fields}
    args = [a for k, v in given.items() for a in (f"--{k}", str(v))]
    r = CliRunner().invoke(app, ["train", "swarm", *args, "--data", str(tiny_h5), "--runs-dir", str(tmp_path),
                                 "--name", "r", "--max-epochs", "1", "--batch-size", "6", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    model = json.loads((tmp_path / "r" / "config.json").read_text())["model"]
    assert {h.option: model[h.field] for h in HYPERPARAMETERS if h.option in given} == given


def test_a_sweep_grid_takes_the_rows_of_its_models_paper_code():
    for name in ("swarm", "set-transformer"):
        code = get_spec(name).code_fields
        rows = [h for h in HYPERPARAMETERS if h.field in code]
        assert [h.field for h in rows] == sorted(code, key=[h.field for h in HYPERPARAMETERS].index)
        values = [8, 3, 2]  # hidden 8 (a multiple of the Set Transformer's 4 heads), then 3 and 2
        grid = "\n".join(f"{h.option} = {v}" for h, v in zip(rows, values, strict=True))
        spec = parse_spec(f'minutes = 1\n[[grid]]\nmodel = "{name}"\n{grid}\n', "t")
        assert [getattr(spec.configs[0], h.field) for h in rows] == values

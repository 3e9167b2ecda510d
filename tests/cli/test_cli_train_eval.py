"""gen-data -> train -> eval through the CLI, and every bad input as a one-line error: exit 2 for an option
value wrong in itself, 1 for a bad file or run."""

import json

import h5py
import numpy as np
import pytest
import torch

from swarmctl.data.hdf5 import read_dataset, write_dataset
from swarmctl.training.checkpoint import load_checkpoint

TINY_TRAIN = ["--hidden", "8", "--iters", "3", "--batch-size", "6", "--max-epochs", "2"]
# what the commands print and keep is what these tests read: the curves after each training are saved undrawn (drawn
# for real in tests/robustness/test_robust_results.py and tests/test_runs_train.py)
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def assert_user_error(result, *fragments, code=1):
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for frag in fragments:
        assert frag in lines[0]


def test_gen_data_writes_and_refuses_to_overwrite(tmp_path, cli):
    out = tmp_path / "d.h5"
    r = cli("gen-data", "--seed", 1, "--tasks", 20, "--n-min", 5, "--n-max", 9, "--out", out)
    assert r.exit_code == 0, r.output
    splits, info = read_dataset(out)
    assert (len(splits["train"]), len(splits["val"]), info["seed"]) == (18, 2, 1)
    assert_user_error(cli("gen-data", "--tasks", 20, "--out", out), "--force")
    again = cli("gen-data", "--seed", 1, "--tasks", 20, "--n-min", 5, "--n-max", 9, "--out", out, "--force")
    assert again.exit_code == 0
    assert read_dataset(out)[1]["checksum"] == info["checksum"]  # same seed, same content


def test_gen_data_bad_parameters(tmp_path, cli):
    assert_user_error(cli("gen-data", "--k-max", 12, "--out", tmp_path / "x.h5"), "--k-max", code=2)
    assert not (tmp_path / "x.h5").exists()
    assert cli("gen-data", "--tasks", "many").exit_code == 2


def test_train_then_eval(tiny_h5, tmp_path, cli):
    runs = tmp_path / "runs"
    r = cli("train", "swarm", *TINY_TRAIN, "--data", tiny_h5, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    run_dir = runs / "swarm-8-3-1-s0"
    assert {p.name for p in run_dir.iterdir()} >= {"config.json", "metrics.jsonl", "best.pt", "last.pt", "curves.png"}
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in records] == [0, 1]
    assert {"train_loss", "val_loss", "lr", "net_seconds", "backtracks"} <= set(records[0])
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model"]["dim_hidden"] == 8 and cfg["train"]["lr"] == 0.01 and cfg["run"]["code"] == "8-3-1"
    ckpt = load_checkpoint(run_dir / "best.pt")
    assert ckpt.model_config.name == "swarm" and ckpt.swarmctl_version

    r = cli("eval", "swarm-8-3-1-s0", "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    res = json.loads((run_dir / "eval-val.json").read_text())
    assert res["loss"] == pytest.approx(min(x["val_loss"] for x in records), rel=1e-5)
    assert 0 <= res["accuracy"] <= 1 and 0 < res["oracle_loss"] < res["loss"]
    # the same checkpoint by path, on the train split
    r = cli("eval", run_dir / "best.pt", "--split", "train", "--out", tmp_path / "e.json")
    assert r.exit_code == 0 and json.loads((tmp_path / "e.json").read_text())["tasks"] == 18


def test_train_refuses_an_existing_run_and_resume_extends_it(tiny_h5, tmp_path, cli):
    runs = tmp_path / "runs"
    first = cli("train", "set-linear", "--batch-size", 6, "--max-epochs", 1, "--data", tiny_h5, "--runs-dir", runs)
    assert first.exit_code == 0
    assert_user_error(cli("train", "set-linear", "--max-epochs", 1, "--data", tiny_h5, "--runs-dir", runs), "--resume")
    r = cli("train", "set-linear", "--resume", "set-linear-64-6-s0", "--max-epochs", 3, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    lines = (runs / "set-linear-64-6-s0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [0, 1, 2]


def _write_modified(src, dst, mutate):
    splits, info = read_dataset(src)
    mutate(splits)
    write_dataset(dst, splits, kind="clustering", seed=0, generator=info["generator"])


def _nan(splits):
    splits["train"].points[0, 0] = np.inf


def _one_entity(splits):
    t = splits["val"]
    object.__setattr__(t, "offsets", np.concatenate([[0, 1], t.offsets[1:]]))
    object.__setattr__(t, "n_clusters", np.concatenate([[1], t.n_clusters]))
    object.__setattr__(t, "means", np.concatenate([t.means[:1], t.means]))
    object.__setattr__(t, "covs", np.concatenate([t.covs[:1], t.covs]))
    object.__setattr__(t, "weights", np.concatenate([t.weights[:1], t.weights]))


def _bad_data(kind, tiny_h5, tmp_path):
    path = tmp_path / f"{kind}.h5"
    if kind == "missing":
        return path, "no such dataset file"
    if kind == "not-hdf5":
        path.write_text("not hdf5")
        return path, "not an HDF5 file"
    if kind == "schema":
        path.write_bytes(tiny_h5.read_bytes())
        with h5py.File(path, "a") as f:
            f.attrs["schema_version"] = 7
        return path, "schema version 7"
    if kind == "checksum":
        path.write_bytes(tiny_h5.read_bytes())
        with h5py.File(path, "a") as f:
            f["val/points"][0, 0] = 123.0
        return path, "checksum"
    if kind == "nan":
        _write_modified(tiny_h5, path, _nan)
        return path, "NaN or infinite"
    if kind == "one-entity":
        _write_modified(tiny_h5, path, _one_entity)
        return path, "has 1 entities"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "not-hdf5", "schema", "checksum", "nan", "one-entity"])
def test_train_rejects_bad_data_and_writes_nothing(kind, tiny_h5, tmp_path, cli):
    path, message = _bad_data(kind, tiny_h5, tmp_path)
    runs = tmp_path / "runs"
    assert_user_error(cli("train", "swarm", *TINY_TRAIN, "--data", path, "--runs-dir", runs), message)
    assert not runs.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "unknown model 'nope'; choose one of:"),
        (["swarm", "--iters", 0], "--iters must be >= 1"),
        (["swarm", "--hidden", 0], "--hidden must be >= 1"),
        (["set-transformer", "--hidden", 30, "--heads", 4], "--heads (4) must divide --hidden (30)"),
        (["swarm", "--minutes", -1], "--minutes must be > 0"),
    ],
)
def test_train_rejects_bad_hyper_parameters_and_writes_nothing(args, message, tiny_h5, tmp_path, cli):
    runs = tmp_path / "runs"
    assert_user_error(cli("train", *args, "--data", tiny_h5, "--runs-dir", runs), message, code=2)
    assert not runs.exists()


def test_bad_option_type_exits_2(tiny_h5, cli):
    assert cli("train", "swarm", "--iters", "ten", "--data", tiny_h5).exit_code == 2


def test_resume_errors(tiny_h5, tmp_path, cli):
    runs = tmp_path / "runs"
    assert_user_error(cli("train", "swarm", "--resume", "ghost", "--runs-dir", runs), "no run 'ghost'")
    assert cli("train", "swarm", *TINY_TRAIN, "--max-epochs", 1, "--data", tiny_h5, "--runs-dir", runs).exit_code == 0
    assert_user_error(cli("train", "lstm", "--resume", "swarm-8-3-1-s0", "--runs-dir", runs),
                      "trains model 'swarm', not 'lstm'")


def test_eval_rejects_foreign_and_other_version_checkpoints(tiny_h5, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default output in the working folder would show too
    runs = tmp_path / "runs"
    assert cli("train", "swarm", *TINY_TRAIN, "--max-epochs", 1, "--data", tiny_h5, "--runs-dir", runs).exit_code == 0
    best = runs / "swarm-8-3-1-s0" / "best.pt"
    ckpt = torch.load(best, weights_only=True)  # the file's dict, to damage
    other = dict(ckpt, format=99)
    torch.save(other, tmp_path / "future.pt")
    wrong = dict(ckpt, config={**ckpt["config"], "model": {**ckpt["config"]["model"], "name": "set-linear"}})
    torch.save(wrong, tmp_path / "wrong.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    for args, message in (([tmp_path / "future.pt"], "checkpoint format 99"),
                          ([tmp_path / "wrong.pt"], "belongs to another model"),
                          ([tmp_path / "junk.pt"], "not a readable swarmctl checkpoint"),
                          (["nothing-here", "--runs-dir", runs], "no run 'nothing-here'")):
        before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
        assert_user_error(cli("eval", *args), message)
        assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before, args
    r = cli("eval", best, "--data-dir", tmp_path)  # a clustering run reads a file: the folder option is refused
    assert r.exit_code == 2 and "score them on a file with --data" in r.output, r.output


@pytest.mark.parametrize("model", ["swarm-mog", "swarm-image"])
def test_data_given_to_a_task_that_takes_none_is_a_bad_option_value(cli, tmp_path, model):
    """Neither the mog nor the image task reads --data for training: the same mistake, one exit code (2),
    one line naming --data, and no run folder."""
    (tmp_path / "d1.h5").write_bytes(b"")
    r = cli("train", model, "--data", tmp_path / "d1.h5", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "--data" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "runs").exists()


def test_train_has_one_option_per_row_of_the_two_tables():
    """`train`'s options are written out in its signature; the tables they come from (the models'
    hyper-parameters, TrainConfig's user-set fields) stay the one source: a field without its option (or an
    option left over) fails here."""
    import inspect

    from swarmctl.catalog import catalog
    from swarmctl.cli.train import train_cmd
    from swarmctl.config import TRAIN_OPTIONS

    own = {"ctx", "model", "data", "dataset", "data_dir", "name", "runs_dir", "resume"}  # not from a table
    tables = {h["option"] for h in catalog()["hyperparameters"]} | {row.field for row in TRAIN_OPTIONS}
    assert set(inspect.signature(train_cmd).parameters) - own == tables

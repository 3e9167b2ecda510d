"""Shipped models: eval, plot-entropy, shuffle-variance and sample use them when no local run is named, write their
results under the runs folder (never into the shipped folder), and say which model they used."""

import json

import pytest
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.models import count_parameters
from swarmctl.runs import load_model, open_run, shipped_checkpoint, shipped_models
from swarmctl.tasks import get_task
from swarmctl.training.checkpoint import load_checkpoint
from tools.campaigns.shipping import export_weights

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def shipped(tmp_path, trained_runs, monkeypatch):
    runs, data = trained_runs
    folder = tmp_path / "pretrained"
    export_weights(runs / "swarm" / "best.pt", folder / "swarm-tiny.pt", data_path=str(data))
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(folder))
    return folder, data


def test_exported_weights_hold_no_optimizer_and_load_as_the_same_model(shipped, trained_runs):
    folder, _ = shipped
    runs, _ = trained_runs
    ckpt = load_checkpoint(folder / "swarm-tiny.pt")
    assert ckpt.optimizer is None and ckpt.task == "clustering"
    a, _ = load_model(folder / "swarm-tiny.pt")
    b, _ = load_model(runs / "swarm" / "best.pt")
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert x.dtype == y.dtype and x.equal(y), k
    assert shipped_checkpoint(get_task("clustering")) == folder / "swarm-tiny.pt"


def test_eval_and_plot_entropy_use_the_shipped_model_when_no_run_is_named(shipped, tmp_path):
    folder, _ = shipped
    runs = tmp_path / "runs"
    before = sorted(p.name for p in folder.iterdir())
    r = cli("eval", "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "shipped model" in r.output and "swarm-tiny.pt" in r.output
    res = json.loads((runs / "pretrained-swarm-tiny" / "eval-val.json").read_text())
    assert res["tasks"] == 10 and res["loss"] > 0
    r = cli("plot-entropy", "--runs-dir", runs, "--grid", 6, "--clusters", 3, "--size", 10, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert (runs / "pretrained-swarm-tiny" / "entropy" / "entropy.png").is_file()
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside the shipped model


def test_shuffle_variance_uses_the_shipped_model_when_no_run_is_named(shipped, tmp_path):
    folder, _ = shipped
    runs = tmp_path / "runs"
    before = sorted(p.name for p in folder.iterdir())
    r = cli("shuffle-variance", "--runs-dir", runs, "--tasks", 2, "--shuffles", 3, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "shipped model" in r.output and "swarm-tiny.pt" in r.output
    out = runs / "pretrained-swarm-tiny" / "shuffle-variance"
    assert json.loads((out / "summary.json").read_text())  # one model's spread, under the runs folder
    assert (out / "shuffle-variance.png").is_file() and (out / "pretrained-swarm-tiny.npz").is_file()
    r = cli("shuffle-variance", "--runs-dir", runs, "--replot")  # the shipped model's saved numbers, redrawn
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside the shipped model


def test_without_a_shipped_model_the_commands_name_the_fix(tmp_path):
    r = cli("eval", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "no shipped clustering or" in r.output and "Traceback" not in r.output
    r = cli("plot-entropy", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "no shipped clustering model" in r.output and "Traceback" not in r.output
    r = cli("shuffle-variance", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "no shipped clustering model" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []  # no runs folder, no dataset generated for a model that is not there


def test_a_shipped_model_gets_its_data_ensured_unless_data_is_named(tmp_path, trained_runs, monkeypatch):
    runs, _ = trained_runs
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(tmp_path / "p"))
    export_weights(runs / "swarm" / "best.pt", tmp_path / "p" / "m.pt", data_path=str(tmp_path / "gone.h5"))
    asked = []
    monkeypatch.setattr(type(get_task("clustering")), "ensure_data",
                        lambda self, cfg, progress=None: asked.append(cfg.path))
    opened = open_run(None, tmp_path / "runs", "cpu")
    assert opened.shipped and opened.dir == tmp_path / "runs" / "pretrained-m" and asked == [str(tmp_path / "gone.h5")]
    assert not open_run("swarm", runs, "cpu").shipped and len(asked) == 1
    assert open_run(None, tmp_path / "runs", "cpu", data=tmp_path / "mine.h5").shipped and len(asked) == 1
    r = cli("eval", "--runs-dir", tmp_path / "runs")  # not the default file: nothing generated, one line
    assert r.exit_code == 1 and "gone.h5" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_sample_uses_the_shipped_image_model_when_runs_has_none(tmp_path, fake_mnist, monkeypatch):
    runs = tmp_path / "runs"
    r = cli("train", "swarm-image", "--dataset", "mnist", "--data-dir", fake_mnist, "--hidden", "8", "--iters", "2",
            "--batch-size", "20", "--max-epochs", "1", "--runs-dir", runs, "--name", "img")
    assert r.exit_code == 0, r.output
    export_weights(runs / "img" / "best.pt", tmp_path / "p" / "swarm-image-mnist.pt")
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(tmp_path / "p"))
    empty = tmp_path / "empty-runs"
    r = cli("sample", "--dataset", "mnist", "--runs-dir", empty, "--per-class", 1)
    assert r.exit_code == 0, r.output
    assert "shipped model" in r.output
    assert (empty / "pretrained-swarm-image-mnist" / "samples-s0.png").is_file()
    r = cli("sample", "--dataset", "fashion-mnist", "--runs-dir", empty)
    assert r.exit_code == 1 and "train one with" in r.output


SHIPPED = ("swarm-192-10-1-clustering.pt", "swarm-image-256-10-1-mnist.pt",
           "swarm-192-10-1-clustering-broad-16slots.pt")


def test_the_shipped_models_are_found_by_their_records_and_match_them(monkeypatch):
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    models = shipped_models()
    assert sorted(m.checkpoint.name for m in models) == sorted(SHIPPED)  # all there, each with its record
    for m in models:
        model, ckpt = load_model(m.checkpoint)
        assert ckpt.optimizer is None and m.checkpoint.stat().st_size < 16 * 2**20
        assert ckpt.task == m.task and ckpt.config["model"] == m.record["config"]["model"]
        assert count_parameters(model) == m.record["parameters"]
        assert ckpt.state.best_epoch == m.record["best_epoch"] < m.record["epochs"]
    assert shipped_checkpoint(get_task("image"), "mnist").name == SHIPPED[1]


@pytest.mark.slow
def test_the_shipped_clustering_model_scores_what_its_record_says(tmp_path, monkeypatch):
    """Generates the paper's seed-0 dataset (the shipped model's) and scores the model on it on the CPU."""
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    monkeypatch.chdir(tmp_path)
    r = cli("eval", "--device", "cpu")
    assert r.exit_code == 0, r.output
    (model,) = [m for m in shipped_models() if m.task == "clustering" and "default_for" not in m.record]
    res = json.loads((tmp_path / "runs" / f"pretrained-{model.checkpoint.stem}" / "eval-val.json").read_text())
    for key in ("loss", "accuracy", "oracle_loss", "oracle_accuracy"):  # trained and scored on a GPU (TF32)
        assert res[key] == pytest.approx(model.record["eval"][key], rel=2e-3), key


def test_a_damaged_unrelated_file_in_the_shipped_folder_is_skipped_with_a_warning(shipped, tmp_path):
    folder, _ = shipped
    (folder / "junk.pt").write_bytes(b"not a checkpoint")  # no record: not read
    (folder / "broken.json").write_text("{not json")
    (folder / "orphan.json").write_text(json.dumps({"file": "missing.pt", "task": "clustering",
                                                    "config": {"model": {}}}))
    r = cli("eval", "--runs-dir", tmp_path / "runs", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "swarm-tiny.pt" in r.output
    for name in ("junk.pt", "broken.json", "missing.pt"):
        assert name in r.output  # each named in a warning


def test_an_unwritable_runs_folder_is_refused_before_any_data_is_made(shipped, tmp_path):
    (tmp_path / "afile").write_text("")
    for args in (("eval",), ("plot-entropy", "--grid", 4)):
        r = cli(*args, "--runs-dir", tmp_path / "afile")
        assert r.exit_code == 1 and "not a folder" in r.output and "Traceback" not in r.output


def test_a_model_that_is_a_commands_default_comes_after_its_tasks_others(tmp_path, trained_runs, monkeypatch):
    runs, _ = trained_runs
    folder = tmp_path / "p"
    export_weights(runs / "swarm" / "best.pt", folder / "a-broad.pt", record={"default_for": ["cluster"]})
    export_weights(runs / "swarm" / "best.pt", folder / "b-paper.pt")  # after it by name
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(folder))
    assert shipped_checkpoint(get_task("clustering")) == folder / "b-paper.pt"  # eval's and plot-entropy's

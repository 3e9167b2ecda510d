"""Shipped models: eval, plot-entropy and sample use them when no local run is named, write their
results under the runs folder (never into the shipped folder), and say which model they used."""

import json

import pytest
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.runs import export_weights, load_model, open_run, pretrained_dir, shipped_checkpoint
from swarmctl.tasks.clustering import ClusteringTask
from swarmctl.training.checkpoint import load_checkpoint

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
    assert ckpt["optimizer"] is None and ckpt["task"] == "clustering"
    a, _ = load_model(folder / "swarm-tiny.pt")
    b, _ = load_model(runs / "swarm" / "best.pt")
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert x.dtype == y.dtype and x.equal(y), k
    assert shipped_checkpoint(ClusteringTask()) == folder / "swarm-tiny.pt"


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


def test_without_a_shipped_model_the_commands_name_the_fix(tmp_path):
    r = cli("eval", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "no shipped clustering model" in r.output and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []  # no runs folder, no dataset generated for a model that is not there


def test_a_shipped_model_gets_its_data_ensured_and_a_local_run_does_not(tmp_path, trained_runs, monkeypatch):
    runs, _ = trained_runs
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(tmp_path / "p"))
    export_weights(runs / "swarm" / "best.pt", tmp_path / "p" / "m.pt", data_path=str(tmp_path / "gone.h5"))
    asked = []
    monkeypatch.setattr(ClusteringTask, "ensure_data", lambda self, cfg, progress=None: asked.append(cfg.path))
    opened = open_run(None, tmp_path / "runs", "cpu", task=ClusteringTask())
    assert opened.shipped and opened.dir == tmp_path / "runs" / "pretrained-m" and asked == [str(tmp_path / "gone.h5")]
    assert not open_run("swarm", runs, "cpu").shipped and len(asked) == 1
    r = cli("eval", "--runs-dir", tmp_path / "runs")  # not the default file: nothing generated, one line
    assert r.exit_code == 1 and "gone.h5" in r.output and "Traceback" not in r.output


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


def test_the_shipped_models_in_the_repository_load(monkeypatch):
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    files = sorted(pretrained_dir().glob("*.pt"))
    for path in files:
        model, ckpt = load_model(path)
        assert ckpt["optimizer"] is None and path.stat().st_size < 8 * 2**20
        assert (path.with_suffix(".json")).is_file()  # its config, training record and evaluation


def test_an_unwritable_runs_folder_is_refused_before_any_data_is_made(shipped, tmp_path):
    (tmp_path / "afile").write_text("")
    for args in (("eval",), ("plot-entropy", "--grid", 4)):
        r = cli(*args, "--runs-dir", tmp_path / "afile")
        assert r.exit_code == 1 and "not a folder" in r.output and "Traceback" not in r.output

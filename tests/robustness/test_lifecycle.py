"""The run lifecycle under faults, in one process: dead names, orphan temporary files, partial metrics
lines, what a resume may change, checkpoints that belong to another run, run names, the data a run
was trained on, and damaged run folders seen by the commands that scan them."""

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import tiered

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.runs import resume_command, run_lock, start_run

TINY = ["--hidden", "8", "--iters", "2", "--batch-size", "6", "--device", "cpu"]
# a run's files and lock are what these tests read: the curves after each training are saved undrawn (drawn for real
# in tests/robustness/test_robust_results.py and tests/test_runs_train.py)
pytestmark = pytest.mark.usefixtures("figures_unrendered")
PARAMS = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)


def _epochs(run_dir):
    return [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _one_line_error(result, code=1):
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and len(lines) <= 3, result.output
    return result.output


def _temps(folder):
    return sorted(p.name for p in folder.rglob("*.tmp"))


def _train_a(cli, data, runs):
    r = cli("train", "swarm", *TINY, "--data", data, "--runs-dir", runs, "--name", "a", "--max-epochs", 2)
    assert r.exit_code == 0, r.output
    return runs, runs / "a"


@pytest.fixture(scope="module")
def _trained_once(tmp_path_factory):
    from faults import cli

    root = tmp_path_factory.mktemp("lifecycle")
    generate_dataset(root / "tiny.h5", ClusteringParams(**PARAMS), seed=0)
    return _train_a(cli, root / "tiny.h5", root / "runs")[0]


@pytest.fixture
def trained(_trained_once, tmp_path):
    """A run ``a`` trained for 2 epochs, a copy of its own in each test (one training per module): (runs_dir,
    run_dir)."""
    runs = tmp_path / "runs"
    shutil.copytree(_trained_once, runs)
    return runs, runs / "a"


@pytest.fixture
def trained_on_tiny_h5(cli, tiny_h5, tmp_path):
    """A run ``a`` trained for 2 epochs on ``tiny_h5``, for a test that changes that file: (runs_dir, run_dir)."""
    return _train_a(cli, tiny_h5, tmp_path / "runs")


@pytest.fixture(scope="module")
def _dead_once(tmp_path_factory):
    root = tmp_path_factory.mktemp("dead")
    generate_dataset(root / "tiny.h5", ClusteringParams(**PARAMS), seed=0)
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=2,
              device="cpu"), DataConfig(path=str(root / "tiny.h5")), root / "runs", "dead")
    for file in ("last.pt", "best.pt", "metrics.jsonl"):  # what the first epoch would have written
        (root / "runs" / "dead" / file).unlink()
    assert sorted(p.name for p in (root / "runs" / "dead").iterdir()) == [".lock", "config.json"]
    return root / "runs" / "dead"


@pytest.fixture
def dead_run(_dead_once, tmp_path):
    """A run ``dead`` killed (SIGKILL) in its first epoch: its folder holds config.json and its lock only (a run
    that fails with an exception there removes its folder; a kill leaves it). Made once per module, a copy of
    its own in each test: the runs folder."""
    runs = tmp_path / "runs"
    shutil.copytree(_dead_once, runs / "dead")
    return runs


@pytest.mark.parametrize("how", ["resume", "restart"])
def test_a_run_killed_before_its_first_checkpoint_keeps_its_name(cli, dead_run, tiny_h5, how):
    runs = dead_run
    if how == "resume":
        r = cli("train", "swarm", "--resume", "dead", "--runs-dir", runs)
    else:
        r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "dead", "--max-epochs", 2)
    assert r.exit_code == 0, r.output
    assert "never saved a checkpoint" in r.output
    assert _epochs(runs / "dead") == [0, 1]
    assert (runs / "dead" / "last.pt").is_file()


def test_a_run_with_a_checkpoint_is_not_overwritten_by_a_fresh_start(cli, trained, tiny_h5):
    runs, run = trained
    before = (run / "last.pt").read_bytes()
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "a")
    assert "exists" in _one_line_error(r) and "--resume a" in r.output
    assert (run / "last.pt").read_bytes() == before


def test_a_second_writer_is_refused_with_the_holders_pid(cli, trained):
    runs, run = trained
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with run_lock(run):
        r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, "--max-epochs", 4)
        assert f"process {os.getpid()}" in _one_line_error(r)
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k != ".lock"} == {k: v for k, v in before.items() if k != ".lock"}


def test_opening_a_run_for_writing_removes_orphan_temporary_files(cli, trained):
    runs, run = trained
    for name in (".last.pt.x1y2.tmp", ".best.pt.abc.tmp", ".metrics.jsonl.q.tmp"):
        (run / name).write_bytes(b"half a checkpoint")
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, "--max-epochs", 3)
    assert r.exit_code == 0, r.output
    assert _temps(run) == [] and _epochs(run) == [0, 1, 2]


def test_a_partial_last_metrics_line_is_skipped_with_a_warning(cli, trained):
    runs, run = trained
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"epoch": 2, "train_lo')  # SIGKILL during the append
    r = cli("report", "--runs-dir", runs, "--out", runs.parent / "report")
    assert r.exit_code == 0 and "warning" in r.output and "damaged line" in r.output, r.output
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, "--max-epochs", 3)
    assert r.exit_code == 0 and "damaged line" in r.output, r.output
    assert _epochs(run) == [0, 1, 2]


# one rule for every fixed setting (test_runs_train checks it on the library): in the default suite a training
# option, a model option and a value equal to the run's own; the other options in the slow one
@pytest.mark.parametrize("option", [tiered(option, default=option[0] in ("--lr", "--hidden", "--seed")) for option in (
    ["--lr", "0.5"], ["--hidden", "16"], ["--batch-size", "2"], ["--name", "b"], ["--seed", "0"], ["--step", "amp"],
    ["--data", "x.h5"])])
def test_resume_refuses_options_that_cannot_change(cli, trained, option):
    runs, run = trained
    before = (run / "last.pt").read_bytes()
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, *option)
    assert option[0] in _one_line_error(r, code=2) and "--max-epochs" in r.output
    assert (run / "last.pt").read_bytes() == before


def test_resume_to_the_epochs_already_done_is_a_finished_run(cli, trained):
    runs, run = trained
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, "--max-epochs", 2)
    assert r.exit_code == 0 and "done (max epochs)" in r.output and "interrupted" not in r.output, r.output
    assert _epochs(run) == [0, 1]


def test_a_best_pt_of_another_run_is_refused_by_resume_and_eval(cli, trained, tiny_h5):
    runs, run = trained
    r = cli("train", "swarm", "--hidden", "12", "--iters", "2", "--batch-size", "6", "--device", "cpu", "--data",
            tiny_h5, "--runs-dir", runs, "--name", "other", "--max-epochs", 1)
    assert r.exit_code == 0, r.output
    shutil.copy(runs / "other" / "best.pt", run / "best.pt")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for args in (("train", "swarm", "--resume", "a", "--max-epochs", 3), ("eval", "a", "--device", "cpu")):
        r = cli(*args, "--runs-dir", runs)
        assert "does not belong to run" in _one_line_error(r), r.output
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.mark.parametrize("name", ["../x", "../../x", "/abs/x", ".", "..", "a/../../x", "", "a\nb", "x" * 300,
                                  "grp/" + "é" * 128])
def test_run_names_stay_inside_the_runs_folder(cli, tiny_h5, tmp_path, name):
    runs = tmp_path / "deep" / "runs"
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", name, "--max-epochs", 1)
    assert "--name" in _one_line_error(r, code=2)  # the flag the user typed names the problem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.h5"]


@pytest.mark.parametrize("name", ["grp/sub", "with space", "exp[/1]", "it's", "$HOME"])
def test_the_printed_resume_command_names_the_run(tmp_path, name):
    for runs, default in ((tmp_path / "my runs", Path("runs")), (Path("runs"), Path("runs"))):
        args = shlex.split(resume_command("swarm", runs / name, runs, default))
        assert args[:4] == ["swarmctl", "train", "swarm", "--resume"]
        given_runs = Path(args[args.index("--runs-dir") + 1]) if "--runs-dir" in args else default
        assert given_runs / args[4] == runs / name


def test_a_run_under_a_nested_name_resumes_with_the_printed_name(cli, tiny_h5, tmp_path):
    runs = tmp_path / "my runs"
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "grp/exp [1]", "--max-epochs", 1)
    assert r.exit_code == 0, r.output
    args = shlex.split(resume_command("swarm", runs / "grp/exp [1]", runs))
    r = cli(*args[1:], "--max-epochs", 2)
    assert r.exit_code == 0, r.output
    assert _epochs(runs / "grp" / "exp [1]") == [0, 1]


def test_eval_refuses_a_regenerated_data_file_unless_named(cli, trained_on_tiny_h5, tiny_h5):
    runs, run = trained_on_tiny_h5
    generate_dataset(tiny_h5, ClusteringParams(**PARAMS), seed=1, force=True)  # same path, other content
    r = cli("eval", "a", "--runs-dir", runs, "--device", "cpu")
    assert "changed since" in _one_line_error(r) and "--data" in r.output
    assert not (run / "eval-val.json").exists()
    r = cli("eval", "a", "--runs-dir", runs, "--device", "cpu", "--data", tiny_h5)
    assert r.exit_code == 0, r.output


def test_eval_scores_the_paper_recipe_regenerated_elsewhere_with_a_warning(cli, trained_on_tiny_h5, tiny_h5,
                                                                           monkeypatch):
    """The default dataset regenerated on another machine (seed 0, the paper's generator) holds the same
    tasks but not always the same bytes: other scipy or BLAS builds round the covariances' last bits
    differently. A fresh install's `swarmctl eval` refused the shipped model on it; it now warns and scores.
    Here the run's file is made the default dataset and its recipe the paper's, and its checksum is read
    as another machine's."""
    from swarmctl.tasks import clustering

    runs, run = trained_on_tiny_h5
    monkeypatch.setattr(clustering.ClusteringTask, "default_data", str(tiny_h5))
    monkeypatch.setattr(clustering.ClusteringTask, "default_tasks", PARAMS["n_tasks"])
    recipe = {k: v for k, v in PARAMS.items() if k != "n_tasks"}
    monkeypatch.setattr(clustering, "_GENERATOR", {**clustering._GENERATOR, **recipe})
    real = clustering.read_splits
    monkeypatch.setattr(clustering, "read_splits", lambda path, *splits, **kw: (
        lambda d, i: (d, {**i, "checksum": "f" * 64}))(*real(path, *splits, **kw)))
    r = cli("eval", "a", "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "holds the paper's seed-0 tasks" in r.output and (run / "eval-val.json").is_file()
    generate_dataset(tiny_h5, ClusteringParams(**PARAMS), seed=1, force=True)  # another recipe: refused still
    (run / "eval-val.json").unlink()
    r = cli("eval", "a", "--runs-dir", runs, "--device", "cpu")
    assert "changed since" in _one_line_error(r) and not (run / "eval-val.json").exists()


# the default suite: text that is not JSON (test_sweep_specs has JSON that is not a config); every damage slow
@pytest.mark.parametrize("damage", [tiered(damage, default=damage == b"{not json")
                                    for damage in (b"", b"{not json", b'{"model": 3}', b"\xff\xfe\x00", b"[]")])
def test_a_damaged_config_is_skipped_by_the_commands_that_scan_the_runs(cli, trained, damage):
    runs, run = trained
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs, "--max-epochs", 2)  # a second run "b"
    shutil.copytree(run, runs / "b")
    (runs / "b" / "config.json").write_bytes(damage)
    r = cli("report", "--runs-dir", runs, "--out", runs.parent / "report")
    assert r.exit_code == 0 and "skipped run" in r.output and "b" in r.output, r.output
    r = cli("sample", "--runs-dir", runs, "--device", "cpu")  # scans for image runs: none, and one skipped
    assert "skipped" in r.output and "no trained image run" in _one_line_error(r)
    r = cli("eval", "b", "--runs-dir", runs, "--device", "cpu")
    assert "damaged" in _one_line_error(r)


# six drawn damages of one kind (a value of a type no field has): one in the default suite, all in the slow one
@pytest.mark.parametrize("seed", [tiered(seed, default=seed == 0) for seed in range(6)])
def test_a_dead_run_with_a_damaged_config_is_refused_in_one_line(cli, dead_run, seed):
    import random

    runs = dead_run
    config = json.loads((runs / "dead" / "config.json").read_text())
    rng = random.Random(seed)
    section = rng.choice(["model", "train", "data"])
    key = rng.choice(sorted(config[section]))
    config[section][key] = rng.choice([[1], {"a": 1}, [None, "x"]])  # a type no field has
    if rng.random() < 0.3:
        del config[section]
    (runs / "dead" / "config.json").write_text(json.dumps(config))
    before = (runs / "dead" / "config.json").read_bytes()
    r = cli("train", "swarm", "--resume", "dead", "--runs-dir", runs)
    assert "Traceback" not in r.output and r.exit_code == 1, r.output
    assert len([x for x in r.output.splitlines() if x.strip()]) <= 3, r.output
    assert (runs / "dead" / "config.json").read_bytes() == before


def test_a_resumed_graphs_run_off_cuda_says_its_steps_run_eagerly(tmp_path):
    """The first line of a resume says what a new run's says: a graphs mode off CUDA runs eagerly (a resume
    on the CPU of a run started on a card said 'graphs step', as if graphs were used)."""
    data = tmp_path / "d.h5"
    generate_dataset(data, ClusteringParams(**PARAMS), seed=0)
    lines: list[str] = []
    model = ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1)
    start_run(model, TrainConfig(batch_size=6, max_epochs=1, device="cpu", step="amp+graphs"),
              DataConfig(path=str(data)), tmp_path / "runs", "g", announce=lines.append)
    from swarmctl.runs import resume_run

    resume_run("g", tmp_path / "runs", max_epochs=2, announce=lines.append)
    assert "amp+graphs step (as asked; CUDA graphs apply on CUDA only: its steps run eagerly here)" in lines[0]
    assert "amp+graphs step (the run's own; CUDA graphs apply on CUDA only: its steps run eagerly here)" in lines[1]

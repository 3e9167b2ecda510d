"""Generated: every output option of every command aimed at every file the command reads or owns (its
inputs, the checkpoint it uses, a run's own files and lock, a shipped model and its record), with and
without --force; a competing writer that creates an output while the command runs; and an output that
fails after another was written. The promise: --force never reaches those files, an existing file is
never replaced without --force (a race included), and a command's outputs appear all together or not
at all."""

from __future__ import annotations

import errno
import shutil

import numpy as np
import pytest
from conftest import tiered
from faults import assert_clean_failure, cli, competing_writer, failing_writes, snapshot

from tools.campaigns.shipping import export_weights

RUN_OWN = ("best.pt", "last.pt", "config.json", "metrics.jsonl", ".lock")


@pytest.fixture
def case(trained_runs, tmp_path, monkeypatch):
    """root/: runs/x (a trained run, its lock file included), model.pt (a checkpoint outside any run),
    data.h5, points.csv, and pre/ (a shipped model and its record, SWARMCTL_PRETRAINED)."""
    runs, data = trained_runs
    root = tmp_path / "case"
    shutil.copytree(runs / "swarm", root / "runs" / "x")
    (root / "runs" / "x" / ".lock").write_text("12345\n")
    shutil.copyfile(runs / "swarm" / "best.pt", root / "model.pt")
    shutil.copyfile(data, root / "data.h5")
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 1, (30, 2)), rng.normal(6, 1, (30, 2))])
    np.savetxt(root / "points.csv", points, delimiter=",", header="x,y", comments="")
    export_weights(runs / "swarm" / "best.pt", root / "pre" / "swarm-tiny.pt")
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(root / "pre"))
    return root


# target -> the file it names (relative to the case root)
TARGETS = {
    "points": "points.csv",
    "checkpoint": "model.pt",
    "data": "data.h5",
    **{f"run-{name}": f"runs/x/{name}" for name in RUN_OWN},
    "shipped-weights": "pre/swarm-tiny.pt",
    "shipped-record": "pre/swarm-tiny.json",
}


def _command(command, target, root, out):
    """The command line that reads (or owns) ``target`` and writes ``out``."""
    if target == "checkpoint":
        model = [root / "model.pt"]
    elif target.startswith("shipped"):
        model = []
    else:
        model = ["x", "--runs-dir", root / "runs"]
    if command == "cluster":
        return ["cluster", root / "points.csv", *model, "--device", "cpu", "--out", out]
    if command == "eval":
        return ["eval", *model, "--device", "cpu", "--data", root / "data.h5", "--out", out]
    return ["gen-data", "--out", out, "--tasks", 4, "--n-min", 5, "--n-max", 20]


READS = {"cluster": ("points", "checkpoint"), "eval": ("checkpoint", "data"), "gen-data": ()}  # besides those owned


def _cases():
    """(command, target, force): each target of each command once in the default suite, with and without --force in
    turn; the other half in the slow one."""
    out = []
    for command, reads in READS.items():
        for i, target in enumerate((*reads, *(t for t in TARGETS if t.startswith(("run-", "shipped-"))))):
            out += [tiered(command, target, force, default=force == bool(i % 2)) for force in (False, True)]
    return out


@pytest.mark.parametrize(("command", "target", "force"), _cases())
def test_an_output_never_replaces_a_file_the_command_reads_or_owns(case, command, target, force):
    out = case / TARGETS[target]
    args = _command(command, target, case, out) + (["--force"] if force else [])
    before = snapshot(case)
    r = cli(*args)
    assert_clean_failure(r, case, before)
    assert "choose another output path" in r.output and "--force" not in r.output, r.output


# ---- a competing writer: the output appears while the command runs ----------------------------------------

def _cluster(root, *extra):
    return ["cluster", root / "points.csv", "x", "--runs-dir", root / "runs", "--device", "cpu", *extra]


@pytest.mark.parametrize("which", ["--out", "--plot"])
def test_an_output_that_appears_meanwhile_is_not_replaced_without_force(case, which):
    outputs = {"--out": case / "o.csv", "--plot": case / "o.png"}
    before = snapshot(case)
    with competing_writer(outputs[which].name, b"the other process's file\n") as seen:
        r = cli(*_cluster(case, "--out", outputs["--out"], "--plot", outputs["--plot"]))
    assert seen["written"], "the competitor never wrote"
    assert r.exit_code == 1 and "exists" in r.output and "--force" in r.output, r.output
    after = snapshot(case)
    assert after.pop(outputs[which].name) == b"the other process's file\n"
    assert after == before  # neither output of ours, no temporary file


def test_with_force_a_file_that_appears_meanwhile_is_replaced(case):
    out = case / "o.csv"
    with competing_writer(out.name, b"the other process's file\n") as seen:
        r = cli(*_cluster(case, "--out", out, "--force"))
    assert seen["written"] and r.exit_code == 0, r.output
    assert out.read_text().split("\n", 2)[1] == "x,y,cluster,probability,entropy"  # after the comment line


def test_gen_data_never_replaces_a_file_that_appears_meanwhile(case):
    out = case / "d.h5"
    before = snapshot(case)
    with competing_writer(out.name, b"the other process's file\n") as seen:
        r = cli("gen-data", "--out", out, "--tasks", 4, "--n-min", 5, "--n-max", 20)
    assert seen["written"] and r.exit_code == 1 and "exists" in r.output, r.output
    assert snapshot(case) == {**before, "d.h5": b"the other process's file\n"}


# ---- all or nothing -----------------------------------------------------------------------------------------

# each output failing once in the default suite (the CSV on a full disk, the PNG past a file-size limit); the
# other two pairs slow
@pytest.mark.parametrize(("failing", "err"), [
    tiered(failing, err, default=(failing == "o.csv") == (err == errno.ENOSPC))
    for failing in ("o.csv", "o.png") for err in (errno.EFBIG, errno.ENOSPC)])
def test_cluster_writes_both_outputs_or_neither(case, failing, err):
    before = snapshot(case)
    with failing_writes(failing, err) as seen:
        r = cli(*_cluster(case, "--out", case / "o.csv", "--plot", case / "o.png"))
    assert seen["n"] >= 1
    assert_clean_failure(r, case, before)


def test_a_plot_named_in_capitals_is_written_under_that_name(case):
    (case / "o.png").write_bytes(b"keep me\n")
    before = snapshot(case)
    r = cli(*_cluster(case, "--out", case / "o.csv", "--plot", case / "o.PNG"))
    assert r.exit_code == 0, r.output
    after = snapshot(case)
    assert after["o.png"] == before["o.png"] and after["o.PNG"].startswith(b"\x89PNG")


# ---- eval and sample never replace a file of the user's without --force ------------------------------------

@pytest.fixture
def own_data_run(tmp_path):
    """root/: data.h5 and runs/r, a tiny run trained on it (eval reads it when --data is left out)."""
    from conftest import TINY_PARAMS

    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.runs import start_run

    root = tmp_path / "own"
    root.mkdir()
    generate_dataset(root / "data.h5", ClusteringParams(**TINY_PARAMS), seed=0)
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=1, device="cpu"),
              DataConfig(path=str(root / "data.h5")), root / "runs", "r")
    return root


@pytest.mark.parametrize("scored_on", [None, "other.h5"])
@pytest.mark.parametrize("force", [False, True])
def test_eval_never_writes_its_json_over_the_runs_own_dataset(own_data_run, force, scored_on):
    """Neither when it scores on that dataset nor when --data names another: the run's own stays its own."""
    root = own_data_run
    data = []
    if scored_on is not None:
        shutil.copyfile(root / "data.h5", root / scored_on)
        data = ["--data", root / scored_on]
    before = snapshot(root)
    r = cli("eval", "r", "--runs-dir", root / "runs", "--device", "cpu", *data, "--out", root / "data.h5",
            *(["--force"] if force else []))
    assert_clean_failure(r, root, before)
    assert "input" in r.output and "data.h5" in r.output, r.output


def test_eval_refuses_to_replace_an_existing_file_without_force(case):
    notes = case / "notes.txt"
    notes.write_text("my notes\n")
    args = ["eval", "x", "--runs-dir", case / "runs", "--device", "cpu", "--data", case / "data.h5", "--out", notes]
    before = snapshot(case)
    r = cli(*args)
    assert_clean_failure(r, case, before)
    assert "notes.txt exists" in r.output and "--force" in r.output, r.output
    r = cli(*args, "--force")
    assert r.exit_code == 0, r.output
    assert notes.read_text().startswith("{")


@pytest.fixture
def image_run(tmp_path):
    from conftest import write_fake_mnist

    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.runs import start_run

    root = tmp_path / "img"
    images = write_fake_mnist(root / "images")
    start_run(ModelConfig(name="swarm-image", dim_hidden=8, n_iter=2), TrainConfig(batch_size=20, max_epochs=1,
              device="cpu"), DataConfig(path=str(images), dataset="mnist"), root / "runs", "img")
    return root


# the .npy beside the PNG in the default suite; the PNG itself (the rule every command's --out keeps) slow
@pytest.mark.parametrize("existing", [tiered("mydata.npy", default=True), tiered("mydata.png", default=False)])
def test_sample_never_replaces_an_existing_file_beside_its_png_without_force(image_run, existing):
    root = image_run
    (root / existing).write_bytes(b"the user's own array\n")
    args = ["sample", "--run", "img", "--runs-dir", root / "runs", "--device", "cpu", "--per-class", 1,
            "--out", root / "mydata.png"]
    before = snapshot(root)
    r = cli(*args)
    assert_clean_failure(r, root, before)
    assert f"{existing} exists" in r.output and "--force" in r.output, r.output
    r = cli(*args, "--force")
    assert r.exit_code == 0, r.output
    assert "mydata.png" in r.output and "mydata.npy" in r.output, r.output  # the summary names both files
    assert (root / "mydata.npy").read_bytes().startswith(b"\x93NUMPY")


# command -> (its arguments, given the case root and the user-named --out; the file of the command's own that
# --out may already hold, relative to --out: "" for a file output)
OVERWRITING = {
    "eval": (lambda root, out: ["eval", "x", "--runs-dir", root / "runs", "--device", "cpu", "--data",
                                root / "data.h5", "--out", out], ""),
    "cluster": (lambda root, out: ["cluster", root / "points.csv", "x", "--runs-dir", root / "runs", "--device", "cpu",
                                   "--out", out], ""),
    "gen-data": (lambda root, out: ["gen-data", "--out", out, "--tasks", 4, "--n-min", 5, "--n-max", 20], ""),
    "sample": (lambda root, out: ["sample", "--run", "img", "--runs-dir", root / "runs", "--device", "cpu",
                                  "--per-class", 1, "--out", out], ""),
    "report": (lambda root, out: ["report", "--runs-dir", root / "runs", "--out", out], "report.md"),
    "shuffle-variance": (lambda root, out: ["shuffle-variance", "x", "--runs-dir", root / "runs", "--data",
                                            root / "data.h5", "--tasks", 2, "--shuffles", 2, "--device", "cpu",
                                            "--out", out], "summary.json"),
    "plot-entropy": (lambda root, out: ["plot-entropy", "x", "--runs-dir", root / "runs", "--data", root / "data.h5",
                                        "--index", 0, "--grid", 4, "--device", "cpu", "--out", out], "entropy.png"),
}


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["without-force", "with-force"])
@pytest.mark.parametrize("command", list(OVERWRITING))
def test_every_command_replaces_an_existing_user_named_output_only_with_force(request, command, force):
    """One rule for all seven commands that write outputs (docs/guarantees.md): a file of the command's that
    already exists where --out names is refused in one line naming --force (exit 1, nothing changed), and
    replaced with --force."""
    root = request.getfixturevalue("image_run" if command == "sample" else "case")
    args, own = OVERWRITING[command]
    out = root / ("mine.png" if command == "sample" else "mine.h5" if command == "gen-data" else "mine")
    existing = out / own if own else out
    existing.parent.mkdir(parents=True, exist_ok=True)
    existing.write_bytes(b"the user's own file\n")
    before = snapshot(root)
    r = cli(*args(root, out), *(["--force"] if force else []))
    if not force:
        assert_clean_failure(r, root, before)
        assert "--force" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    else:
        assert r.exit_code == 0, r.output
        assert existing.read_bytes() != b"the user's own file\n"

"""torchrun's environment variables set by hand, wrongly: one line naming the variable, exit 1 (the
environment is no option), nothing written."""

import shutil

import pytest
from conftest import tiered
from faults import snapshot
from typer.testing import CliRunner

from swarmctl.cli import app

UNSET = {"WORLD_SIZE": None, "RANK": None, "LOCAL_RANK": None, "MASTER_ADDR": None, "MASTER_PORT": None}
LAUNCH = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
CASES = [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "-2", "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "2"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "x", **LAUNCH}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "2", **LAUNCH}, "not below WORLD_SIZE"),
    ({"WORLD_SIZE": "2", "RANK": "5", **LAUNCH}, "not below WORLD_SIZE"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1", **LAUNCH}, "LOCAL_RANK"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "zero", **LAUNCH}, "LOCAL_RANK"),
    ({"RANK": "abc"}, "RANK"),
    ({"RANK": "-1"}, "RANK"),
]
# the default suite: a fresh start with each variable named once (WORLD_SIZE, RANK, a RANK not below WORLD_SIZE,
# LOCAL_RANK) and one resume; every case both ways in the slow one
DEFAULT = {(0, False), (3, False), (5, False), (7, False), (0, True)}


def _train_args(data, runs):
    return ["train", "swarm", "--hidden", "8", "--iters", "2", "--max-epochs", "1", "--batch-size", "6",
            "--device", "cpu", "--data", str(data), "--runs-dir", str(runs), "--name", "a"]


@pytest.fixture(scope="module")
def _one_epoch_run(tmp_path_factory):
    """A runs folder with run ``a`` trained for one epoch under a clean environment (trained once; each test
    resumes a copy of its own)."""
    from conftest import TINY_PARAMS

    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset

    root = tmp_path_factory.mktemp("environment")
    generate_dataset(root / "tiny.h5", ClusteringParams(**TINY_PARAMS), seed=0)
    r = CliRunner().invoke(app, _train_args(root / "tiny.h5", root / "runs"), env=UNSET)
    assert r.exit_code == 0, r.output
    return root / "runs"


@pytest.mark.parametrize(("env", "named", "resume"), [
    tiered(env, named, resume, default=(i, resume) in DEFAULT) for resume in (False, True)
    for i, (env, named) in enumerate(CASES)], ids=[
    ("resume " if resume else "") + " ".join(f"{k}={v}" for k, v in env.items())
    for resume in (False, True) for env, _ in CASES])
def test_a_bad_torchrun_environment_is_one_line(request, tmp_path, tiny_h5, env, named, resume):
    runs = tmp_path / "runs"
    args = _train_args(tiny_h5, runs)
    if resume:
        shutil.copytree(request.getfixturevalue("_one_epoch_run"), runs)
        args = ["train", "swarm", "--resume", "a", "--runs-dir", str(runs), "--max-epochs", "2"]
    before = snapshot(tmp_path)
    r = CliRunner().invoke(app, args, env={**UNSET, **env})
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in r.output, r.output
    assert snapshot(tmp_path) == before

"""torchrun's environment variables set by hand, wrongly: one line naming the variable, exit 1 (the
environment is no option), nothing written."""

import pytest
from faults import snapshot
from typer.testing import CliRunner

from swarmctl.cli import app

UNSET = {"WORLD_SIZE": None, "RANK": None, "LOCAL_RANK": None, "MASTER_ADDR": None, "MASTER_PORT": None}
CASES = [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "-2", "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "2"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "x", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}, "not below WORLD_SIZE"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"},
     "LOCAL_RANK"),
    ({"RANK": "abc"}, "RANK"),
]


@pytest.mark.parametrize(("env", "named"), CASES, ids=[" ".join(f"{k}={v}" for k, v in e.items()) for e, _ in CASES])
@pytest.mark.parametrize("resume", [False, True])
def test_a_bad_torchrun_environment_is_one_line(tmp_path, tiny_h5, env, named, resume):
    runs = tmp_path / "runs"
    args = ["train", "swarm", "--hidden", "8", "--iters", "2", "--max-epochs", "1", "--batch-size", "6",
            "--device", "cpu", "--data", str(tiny_h5), "--runs-dir", str(runs), "--name", "a"]
    if resume:
        assert CliRunner().invoke(app, args, env=UNSET).exit_code == 0
        args = ["train", "swarm", "--resume", "a", "--runs-dir", str(runs), "--max-epochs", "2"]
    before = snapshot(tmp_path)
    r = CliRunner().invoke(app, args, env={**UNSET, **env})
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in r.output, r.output
    assert snapshot(tmp_path) == before

"""Adding a train option is one field of TrainConfig and its parameter of `train` (docs/design.md, "Adding a train
option"): in a copy of the package, the test follows the checklist (a field made by `train_option`, its check in
`__post_init__`, the parameter, the help catalog regenerated) and nothing else, and the option appears in
`train --help`, is a sweep key, is checked like every option, and changes on `train --resume`."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# A copy of the package, its help catalog regenerated and seven commands in a process of their own: about 20 s,
# so in the slow tier (`make test-all`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

# Step 1 of the checklist: the field, in TrainConfig's body, and its check, first in __post_init__.
FIELD = '    warmup_epochs: int = train_option(0, "Epochs of learning-rate warm-up", sweep=True, resume=True)\n'
CHECK = ('        if self.warmup_epochs < 0:\n'
         '            raise ConfigError(f"`warmup_epochs` must be >= 0, got {self.warmup_epochs}")\n')
TINY = ["--hidden", "4", "--iters", "1", "--batch-size", "2", "--steps-per-epoch", "1", "--val-batches", "1",
        "--device", "cpu"]


# Step 3: the parameter of `train`, after the last option of the table.
PARAMETER = '    warmup_epochs: Annotated[int | None, _train("warmup_epochs")] = None,\n'


def add_the_option(package: Path) -> None:
    config = package / "config.py"
    text = config.read_text()
    body = re.search(r"class TrainConfig:.*?\n(    def __post_init__\(self\) -> None:\n)", text, re.S)
    assert body is not None, "TrainConfig and its __post_init__ not found"
    at = body.start(1)
    config.write_text(text[:at] + FIELD + "\n" + body.group(1) + CHECK + text[body.end(1):])
    command = package / "cli" / "train.py"
    text = command.read_text()
    last = re.search(r'\n    [a-z_]+: Annotated\[[^\n]*_train\("[a-z_]+"\)\] = None,\n(?!.*_train\(")', text, re.S)
    assert last is not None, "train's table options not found"
    command.write_text(text[:last.end()] + PARAMETER + text[last.end():])


# Step 4 of the checklist, then the commands, in one interpreter (PyTorch loads once): each command's exit code
# and output, and the train section of every run's config.json after it.
DRIVER = """
import json, pathlib, sys
from tools import help_catalog
help_catalog.main()
from typer.testing import CliRunner
from swarmctl.cli import app
results = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    runs = {p.parent.name: json.loads(p.read_text())["train"] for p in pathlib.Path(sys.argv[2]).rglob("config.json")}
    results.append({"exit": r.exit_code, "output": r.output, "runs": runs})
pathlib.Path(sys.argv[3]).write_text(json.dumps(results))
"""
SPEC = ('seeds = [0]\nminutes = 1\nmax_epochs = 1\nbatch_size = 2\ndevice = "cpu"\n'
        '[[grid]]\nmodel = "swarm-mog"\nhidden = 4\niters = 1\n')


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The commands of the tests below, run by the command line of a copy of the package to which the
    checklist added the option."""
    root = tmp_path_factory.mktemp("package")
    shutil.copytree(REPO / "swarmctl", root / "swarmctl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__", "campaigns"))
    add_the_option(root / "swarmctl")
    runs = root / "runs"
    (root / "bad.toml").write_text("warmup_epochs = -1\n" + SPEC)
    (root / "w.toml").write_text("warmup_epochs = 4\n" + SPEC)
    commands = {
        "help": ["train", "--help"],
        "bad": ["train", "swarm-mog", *TINY, "--warmup-epochs", "-1", "--runs-dir", runs / "bad"],
        "train": ["train", "swarm-mog", *TINY, "--max-epochs", 1, "--warmup-epochs", 2, "--runs-dir", runs,
                  "--name", "r"],
        "resume": ["train", "swarm-mog", "--resume", "r", "--max-epochs", 2, "--warmup-epochs", 3, "--runs-dir", runs],
        "fixed": ["train", "swarm-mog", "--resume", "r", "--seed", 1, "--runs-dir", runs],
        "bad sweep": ["sweep", root / "bad.toml", "--runs-dir", runs],
        "sweep": ["sweep", root / "w.toml", "--runs-dir", runs],
    }
    args = json.dumps([[str(a) for a in command] for command in commands.values()])
    out = subprocess.run([sys.executable, "-c", DRIVER, args, runs, root / "results.json"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}, cwd=root,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return dict(zip(commands, json.loads((root / "results.json").read_text()), strict=True))


def test_the_option_is_in_train_help(results):
    r = results["help"]
    assert r["exit"] == 0 and re.search(r"--warmup-epochs +<int> +Epochs of learning-rate warm-up \[default: 0\]\.",
                                        r["output"]), r["output"]


def test_the_option_is_checked_by_train_config(results):
    r = results["bad"]
    assert r["exit"] == 2 and "--warmup-epochs must be >= 0" in r["output"], r["output"]
    assert r["runs"] == {}  # nothing written


def test_the_option_trains_and_changes_on_resume(results):
    assert results["train"]["exit"] == 0, results["train"]["output"]
    assert results["train"]["runs"]["r"]["warmup_epochs"] == 2
    assert results["resume"]["exit"] == 0, results["resume"]["output"]
    assert results["resume"]["runs"]["r"] == {**results["train"]["runs"]["r"], "warmup_epochs": 3, "max_epochs": 2}
    r = results["fixed"]  # an option a resume may not change names this one among those that may
    assert r["exit"] == 2 and "--seed cannot change" in r["output"] and "--warmup-epochs may change" in r["output"]


def test_the_option_is_a_sweep_key(results):
    r = results["bad sweep"]
    assert r["exit"] == 1 and "`warmup_epochs` must be >= 0" in r["output"], r["output"]
    assert results["sweep"]["exit"] == 0, results["sweep"]["output"]
    assert results["sweep"]["runs"]["swarm-mog-4-1-1-s0"]["warmup_epochs"] == 4

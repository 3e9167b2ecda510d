"""The README works as written: its Python example runs, it starts with `make demo` and `make test`, it links
nothing outside the repository, and its `swarmctl` commands run from a copy of a fresh clone. The short
commands run in the default suite; the long ones (training for minutes to hours) run in the slow suite with a
tiny budget appended, or are listed here with the reason they are not run. A command added to the README
must be put in one of these lists."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_fake_mnist

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()

# Seconds each: run exactly as written.
SHORT = [
    "swarmctl --help",
    "swarmctl models",
    "swarmctl sweep sweeps/paper.toml --dry-run",
    "swarmctl cluster docs/iris.csv --columns petal_length,petal_width --plot iris.png",
]
# Minutes or more as written: run in README order in one folder (a later one may read what an earlier one
# wrote), each with what is appended here to cut its budget. The image run reads small fake MNIST files.
LONG = {
    "swarmctl gen-data --seed 0": [],
    "swarmctl train swarm --hidden 192 --iters 10 --minutes 60": ["--minutes", "0.01", "--max-epochs", "1"],
    "swarmctl eval swarm-192-10-1-s0": [],
    "swarmctl train swarm-mog --hidden 768 --iters 20": [
        "--minutes", "0.01", "--max-epochs", "1", "--steps-per-epoch", "2", "--val-batches", "1"],
    "swarmctl train swarm-image --dataset mnist --minutes 480": ["--minutes", "0.01", "--max-epochs", "1"],
    "swarmctl eval": [],
    "swarmctl plot-entropy --size 100 --grid 40": [],
    "swarmctl sample --dataset mnist": [],
}
# Not run: no option cuts their budget.
NOT_RUN = {
    "swarmctl sweep sweeps/best.toml": "18 runs of 60 net minutes; `--dry-run` of the paper's grid runs above",
    "swarmctl report --runs-dir runs/sweep-best": "reads the runs of the sweep above",
}


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def readme_commands(text: str) -> list[str]:
    """Every `swarmctl ...` line of the README's bash blocks, without its comment, in order."""
    lines = (line.split("#", 1)[0].strip() for block in bash_blocks(text) for line in block.splitlines())
    return [line for line in lines if line.startswith("swarmctl")]


def fresh_folder(root: Path) -> Path:
    """What a fresh clone holds that the commands read (the example points, the sweep specs), in a new folder."""
    work = root / "clone"
    work.mkdir()
    shutil.copytree(REPO / "docs", work / "docs")
    shutil.copytree(REPO / "sweeps", work / "sweeps")
    return work


def swarmctl(line: str, work: Path, extra=()):
    """Run one README line as `python -m swarmctl ...` in ``work``, with the repository on the path and the
    shipped models where an install has them."""
    args = shlex.split(line)
    assert args[0] == "swarmctl"
    env = {k: v for k, v in os.environ.items() if k not in ("SWARMCTL_PRETRAINED", "PYTHONPATH")}
    env.update(PYTHONPATH=str(REPO), COLUMNS="200", SWARMCTL_NO_DOWNLOAD="1")
    return subprocess.run([sys.executable, "-m", "swarmctl", *args[1:], *extra], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_readme_starts_with_make_demo_and_make_test():
    first_block = bash_blocks(README)[0]
    assert first_block.splitlines()[0].startswith("make demo") and first_block.splitlines()[1].startswith("make test")


def test_readme_has_the_outline_in_about_250_lines():
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    assert headings == ["Install", "Quickstart", "Commands", "Reproducing the paper", "Table 2 on a CPU",
                        "Cluster your own points",
                        "Shipped models", "The layer from Python", "Benchmarks", "Further docs", "Citation",
                        "License"]
    assert len(README.splitlines()) <= 260


@pytest.mark.parametrize("page", ["README.md", "campaigns/README.md", *sorted(
    str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))])
def test_docs_link_nothing_outside_the_repository(page):
    text = (REPO / page).read_text()
    assert not re.findall(r"\]\((?:[a-z]+:|//)", text), "a link leaves the repository"
    for target in re.findall(r"\]\(([^)#]+)", text):  # every relative link names a file that is there
        if not target.endswith("docs/cluster.md"):  # written with the `cluster` command's changes
            assert ((REPO / page).parent / target).exists(), target


def test_every_readme_command_is_listed_here_once():
    """A command added to the README must be classified: short, long (with its budget) or not run."""
    listed = [*SHORT, *LONG, *NOT_RUN]
    assert len(listed) == len(set(listed))
    assert sorted(set(readme_commands(README))) == sorted(listed)


def test_the_readme_help_runs_as_written_in_a_process_of_its_own(tmp_path):
    r = swarmctl("swarmctl --help", fresh_folder(tmp_path))
    assert r.returncode == 0 and "Usage" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("line", SHORT)
def test_short_readme_command_runs_as_written(line, tmp_path, monkeypatch, cli):
    """In process (PyTorch loads once per worker), from the fresh folder, with the shipped models."""
    monkeypatch.chdir(fresh_folder(tmp_path))
    monkeypatch.delenv("SWARMCTL_PRETRAINED", raising=False)
    r = cli(*shlex.split(line)[1:])
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_long_readme_commands_run_with_a_tiny_budget(tmp_path):
    work = fresh_folder(tmp_path)
    write_fake_mnist(work / "data")
    for line in [c for c in readme_commands(README) if c in LONG]:
        r = swarmctl(line, work, LONG[line])
        assert r.returncode == 0, line + "\n" + r.stdout + r.stderr

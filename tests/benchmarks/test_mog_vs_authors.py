"""benchmarks/mog_vs_authors.py counts the steps of the authors' script without editing it: against a stand-in
for their amortised_MOG.py (same file name, Adam steps in an endless loop, the NumPy aliases the authors use)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "mog_vs_authors.py"

FAKE_AUTHORS = '''
import sys
import numpy as np
import torch
assert sys.argv[1:3] == ["-n_hidden", "64"], sys.argv
np.zeros(3, dtype=np.long).astype(np.int)  # np.int (traces.py): gone since NumPy 1.24
w = torch.nn.Parameter(torch.ones(3))
opt = torch.optim.Adam([w], lr=0.01)
while True:  # the runner stops the script when its window closes
    opt.zero_grad()
    (w ** 2).sum().backward()
    opt.step()
'''


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_the_authors_steps_are_counted_in_the_window_and_the_script_stopped(tmp_path):
    authors = tmp_path / "authors"
    authors.mkdir()
    (authors / "amortised_MOG.py").write_text(FAKE_AUTHORS)
    out = tmp_path / "res.json"
    res = _run("--authors", authors, "--minutes", 0.01, "--only", "authors", "--threads", 1, "--json", out)
    assert res.returncode == 0, res.stderr
    side = json.loads(out.read_text())["sides"]["authors"]
    assert side["steps"] > 10 and side["seconds"] == 0.6 and side["threads"] == 1
    assert side["steps_per_second"] == side["steps"] / 0.6
    assert "authors:" in res.stdout and "machine:" in res.stdout


def test_a_folder_without_the_authors_script_is_named(tmp_path):
    res = _run("--authors", tmp_path, "--minutes", 0.01)
    assert res.returncode == 1 and "no amortised_MOG.py" in res.stderr

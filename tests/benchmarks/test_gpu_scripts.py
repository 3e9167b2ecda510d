"""The prepared GPU calls (benchmarks/gpu/) run here on the CPU in smoke mode, so no device minute is
lost to a typo: every script end to end with tiny sizes, and what it leaves in its output folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_fake_mnist

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "benchmarks" / "gpu"


def _script(name, *args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


# Each script's --help, run as its own __main__ in one interpreter (PyTorch loads once, not three times).
_HELP = """
import runpy, sys
folder, names = sys.argv[1], sys.argv[2:]
sys.path.insert(0, folder)
for name in names:
    sys.argv = [name, "--help"]
    print("=== " + name, flush=True)
    try:
        runpy.run_path(folder + "/" + name, run_name="__main__")
    except SystemExit as exit:
        print("=== exit " + str(exit.code), flush=True)
"""


def test_every_gpu_script_parses_its_options():
    names = ["clustering.py", "mog.py", "image.py"]
    res = subprocess.run([sys.executable, "-c", _HELP, str(SCRIPTS), *names], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    parts = res.stdout.split("=== ")[1:]
    assert [part.splitlines()[0] for part in parts[::2]] == names, res.stdout
    for name, helped, ended in zip(names, parts[::2], parts[1::2], strict=True):
        assert ended.strip() in ("exit 0", "exit None"), (name, res.stderr)
        assert "--smoke" in helped and "--wall" in helped, name


@pytest.mark.slow
def test_the_image_script_continues_a_returned_checkpoint(tmp_path):
    images = write_fake_mnist(tmp_path / "images", gz=True)
    first = _script("image.py", tmp_path / "a", "--smoke", "--skip-tests", "--work", tmp_path / "w1", "--data-dir",
                    images)
    assert first.returncode == 0, first.stdout[-3000:]
    again = _script("image.py", tmp_path / "b", "--smoke", "--skip-tests", "--work", tmp_path / "w2", "--data-dir",
                    images, "--resume", tmp_path / "a")
    assert again.returncode == 0, again.stdout[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "b" / "swarm-image" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # the first call's two epochs kept, one more

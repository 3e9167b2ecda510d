"""The prepared GPU calls (benchmarks/gpu/) run here on the CPU in smoke mode, so no device minute is
lost to a typo: every script end to end with tiny sizes, and what it leaves in its output folder."""

import json
import runpy
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


@pytest.mark.parametrize("name", ["clustering.py", "mog.py", "image.py"])
def test_every_gpu_script_parses_its_options(name, capsys, monkeypatch):
    """Each script's --help, run as its own __main__ with its folder first on sys.path, as `python SCRIPT` runs it
    (in this process: PyTorch is loaded already)."""
    monkeypatch.setattr(sys, "path", [str(SCRIPTS), *sys.path])  # restored after: the scripts add to it too
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    monkeypatch.delitem(sys.modules, "_common", raising=False)  # the folder's own helper module, imported afresh
    try:
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(str(SCRIPTS / name), run_name="__main__")
    finally:
        sys.modules.pop("_common", None)
    assert ended.value.code in (0, None), capsys.readouterr().err
    helped = capsys.readouterr().out
    assert "--smoke" in helped and "--wall" in helped, helped


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

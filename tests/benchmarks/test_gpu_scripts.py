"""The prepared GPU calls (benchmarks/gpu/) run here on the CPU in smoke mode, so no device minute is
lost to a typo: every script end to end with tiny sizes, and what it leaves in its output folder."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import write_fake_mnist

SCRIPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _script(name, *args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("name", ["session.py", "clustering.py", "mog.py", "image.py"])
def test_every_gpu_script_parses_its_options(name):
    res = _script(name, "--help", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--smoke" in res.stdout and "--wall" in res.stdout


@pytest.mark.slow
def test_the_session_script_runs_every_experiment_in_smoke_mode(tmp_path):
    images = write_fake_mnist(tmp_path / "images", gz=True)
    out = tmp_path / "out"
    res = _script("session.py", out, "--smoke", "--wall", "500", "--work", tmp_path / "work", "--data-dir", images)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["bench.txt", "clustering.tgz", "gpu-tests.txt", "image-best.pt", "image-last.pt", "image.tgz",
                     "mog.tgz"]
    assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())  # what one returned file may hold
    members = {}
    for part in ("clustering", "mog", "image"):
        with tarfile.open(out / f"{part}.tgz") as tar:
            members[part] = set(tar.getnames())
    for run in ("clustering/swarm", "clustering/set-transformer", "image/swarm-image"):
        for name in ("config.json", "metrics.jsonl", "curves.png", "weights.pt"):
            assert f"{run}/{name}" in members[run.split("/")[0]], (run, name)
    assert "clustering/swarm/eval-val.json" in members["clustering"]
    assert "mog/swarm-mog/eval-test.json" in members["mog"]
    assert {"image/swarm-image/eval-test.json", "image/swarm-image/samples.png"} <= members["image"]
    assert "clustering/entropy/entropy.png" in members["clustering"]
    with tarfile.open(out / "clustering.tgz") as tar:
        summary = json.load(tar.extractfile("clustering/summary.json"))
    assert summary["swarm"]["epochs"] == 2 and summary["set-transformer"]["epochs"] == 2


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

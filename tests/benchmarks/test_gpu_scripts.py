"""The prepared GPU calls (benchmarks/gpu/) run here on the CPU in smoke mode, so no device minute is
lost to a typo: every script end to end with tiny sizes, and what it leaves in its output folder."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fresh_campaigns, write_fake_mnist

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "benchmarks" / "gpu"


def _script(name, *args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("name", ["session.py", "clustering.py", "mog.py", "image.py"])
def test_every_gpu_script_parses_its_options(name):
    res = _script(name, "--help", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "--smoke" in res.stdout and "--wall" in res.stdout


def _commit(returned, campaigns, pretrained):
    cmd = [sys.executable, str(SCRIPTS / "commit_session.py"), str(returned), "--campaigns", str(campaigns),
           "--pretrained", str(pretrained)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_two_sessions_continue_every_campaign_and_commit_back(tmp_path):
    """The whole cycle of issue 16 in smoke size, twice: each session picks the campaigns up where the
    (copied) campaigns folder left them, returns at most 8 files under 16 MiB, and commit_session.py puts
    them back; the second session continues the first's image run, adds MoG and clustering runs, reuses
    the first's step timings, and a campaign that beats a shipped model replaces it."""
    images = write_fake_mnist(tmp_path / "images", gz=True)
    root, pretrained = tmp_path / "campaigns", tmp_path / "pretrained"
    fresh_campaigns(root)
    pretrained.mkdir()
    shipped = {"file": "swarm-image-8-2-1-mnist.pt", "model": "swarm-image", "code": "8-2-1", "dataset": "mnist",
               "eval": {"bits_per_dim": 99.0}}  # the smoke campaign's shape, a worse recorded number
    (pretrained / "swarm-image-8-2-1-mnist.json").write_text(json.dumps(shipped))
    for i in (1, 2):
        out = tmp_path / f"out{i}"
        res = _script("session.py", out, "--smoke", "--wall", "700", "--campaigns", root, "--work", tmp_path / f"w{i}",
                      "--data-dir", images, timeout=1000)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        files = sorted(p.name for p in out.iterdir())
        assert {"gpu-tests.txt", "bench.txt", "session.json", "mnist-last.pt", "mnist-best.pt", "mnist.tgz",
                "mog.tgz", "clustering.tgz"} == set(files), (files, res.stdout[-3000:])
        assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())  # what one returned file may hold
        done = _commit(out, root, pretrained)
        assert done.returncode == 0, done.stderr
        session = json.loads((out / "session.json").read_text())
        assert session["timing_measured"] == (i == 1)  # the second session reuses the committed timings

    rows = [json.loads(line) for line in (root / "mnist" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # two epochs, then one more from the committed last.pt
    mnist = json.loads((root / "mnist" / "progress.json").read_text())
    assert [s["epochs"] for s in mnist["sessions"]] == [[0, 2], [2, 3]] and mnist["best_bits_per_dim"] < 99
    assert (root / "mnist" / "last.pt").is_file() and (root / "mnist" / "best.pt").is_file()
    mog = json.loads((root / "mog" / "progress.json").read_text())
    assert len(mog["sessions"]) == 2 and {p.name for p in (root / "mog" / "runs").iterdir()} == {"swarm-mog-1",
                                                                                               "swarm-mog-2"}
    clustering = json.loads((root / "clustering" / "progress.json").read_text())
    first_four = ["swarm-192-10-1-s0", "set-transformer-32-60-3-s0", "lstm-128-3-s0", "lstm-sorted-64-3-s0"]
    assert sorted(clustering["runs"]) == sorted(first_four)  # smoke: two runs side by side per session
    assert [s["runs"] for s in clustering["sessions"]] == [first_four[:2], first_four[2:]]
    assert (root / "timing.json").is_file() and len((root / "sessions.jsonl").read_text().splitlines()) == 2
    info = json.loads((pretrained / "swarm-image-8-2-1-mnist.json").read_text())
    assert info["eval"]["bits_per_dim"] == mnist["best_bits_per_dim"]
    assert (pretrained / "swarm-image-8-2-1-mnist.pt").is_file()
    report = subprocess.run([sys.executable, "-m", "swarmctl", "report", str(root / "clustering" / "runs"), "--out",
                             str(tmp_path / "report")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    table = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {m} |" in table for m in ("swarm", "set-transformer", "lstm", "lstm-sorted"))


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

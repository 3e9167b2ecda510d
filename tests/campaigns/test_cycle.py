"""The whole campaign cycle on the CPU in smoke size: two jobs (`swarmctl campaign run --smoke`), each
committed back (`swarmctl campaign commit`) before the next starts."""

import json
import subprocess
import sys

import pytest
from conftest import fresh_campaigns, write_fake_mnist


def _commit(returned, campaigns, pretrained):
    cmd = [sys.executable, "-m", "swarmctl", "campaign", "commit", str(returned), "--campaigns", str(campaigns),
           "--pretrained", str(pretrained)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _run(out, *args, timeout):
    return subprocess.run([sys.executable, "-m", "swarmctl", "campaign", "run", str(out), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_two_sessions_continue_every_campaign_and_commit_back(tmp_path):
    """The whole cycle of issue 16 in smoke size, twice: each session picks the campaigns up where the
    (copied) campaigns folder left them, returns at most 8 files under 16 MiB, and `swarmctl campaign commit`
    puts them back; the second session continues the first's image run, adds MoG and clustering runs, reuses
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
        res = _run(out, "--smoke", "--wall", "700", "--campaigns", root, "--work", tmp_path / f"w{i}",
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

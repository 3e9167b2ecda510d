"""The whole campaign cycle on the CPU in smoke size: four jobs (`python -m tools.campaigns run --smoke`), each
committed back (`python -m tools.campaigns commit`) before the next starts."""

import json
import subprocess
import sys

import pytest
from conftest import fresh_campaigns, write_fake_mnist


def _commit(returned, campaigns, pretrained):
    cmd = [sys.executable, "-m", "tools.campaigns", "commit", str(returned), "--campaigns", str(campaigns),
           "--pretrained", str(pretrained)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _run(out, *args, timeout):
    return subprocess.run([sys.executable, "-m", "tools.campaigns", "run", str(out), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_sessions_continue_every_campaign_and_commit_back(tmp_path):
    """The whole campaign cycle in smoke size: each session picks the campaigns up where the (copied)
    campaigns folder left them, returns at most 8 files under 16 MiB, and `python -m tools.campaigns commit` puts
    them back. MoG's parts and MNIST's checkpoints do not fit in one job's files: the first job trains MoG and
    returns its last.pt in parts, the second MNIST; the third continues the first's MoG run from the
    committed parts (its epochs go on), the fourth the image run; the clustering table fills the first two,
    the step timings of the first are reused, and a campaign that beats a shipped model replaces it."""
    images = write_fake_mnist(tmp_path / "images", gz=True)
    root, pretrained = tmp_path / "campaigns", tmp_path / "pretrained"
    fresh_campaigns(root)
    pretrained.mkdir()
    shipped = {"file": "swarm-image-8-2-1-mnist.pt", "model": "swarm-image", "code": "8-2-1", "dataset": "mnist",
               "eval": {"bits_per_dim": 99.0}}  # the smoke campaign's shape, a worse recorded number
    (pretrained / "swarm-image-8-2-1-mnist.json").write_text(json.dumps(shipped))
    parts = [f"mog-last.pt.part{k}" for k in range(4)]
    returned = {1: {"session.json", "logs.tgz", "mog.tgz", *parts, "clustering.tgz"},
                2: {"session.json", "logs.tgz", "mnist.tgz", "mnist-last.pt", "mnist-best.pt", "clustering.tgz"},
                3: {"session.json", "logs.tgz", "mog.tgz", *parts}, 4: {"session.json", "logs.tgz", "mnist.tgz",
                                                                        "mnist-last.pt", "mnist-best.pt"}}
    only = {3: ["--only", "mog"], 4: ["--only", "mnist"]}
    for i in (1, 2, 3, 4):
        out = tmp_path / f"out{i}"
        res = _run(out, "--smoke", "--wall", "700", "--campaigns", root, "--work", tmp_path / f"w{i}",
                   "--data-dir", images, *only.get(i, []), timeout=1000)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        files = sorted(p.name for p in out.iterdir())
        assert set(files) == returned[i], (files, res.stdout[-3000:])
        assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())  # what one returned file may hold
        done = _commit(out, root, pretrained)
        assert done.returncode == 0, done.stderr
        session = json.loads((out / "session.json").read_text())
        assert session["timing_measured"] == (i == 1)  # the later sessions reuse the committed timings
        assert session.get("waiting") == {1: ["mnist"], 2: ["mog"]}.get(i)
        assert len(session["paper_rows"]) == 10 and session["table"]["runs"] == 18

    rows = [json.loads(line) for line in (root / "mnist" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # two epochs, then one more from the committed last.pt
    mnist = json.loads((root / "mnist" / "progress.json").read_text())
    assert [s["epochs"] for s in mnist["sessions"]] == [[0, 2], [2, 3]] and mnist["best_bits_per_dim"] < 99
    assert (root / "mnist" / "last.pt").is_file() and (root / "mnist" / "best.pt").is_file()
    mog = json.loads((root / "mog" / "progress.json").read_text())
    assert [(s["run"], s["epochs"]) for s in mog["sessions"][-2:]] == [("swarm-mog-1", [0, 2]), ("swarm-mog-1", [2, 4])]
    assert (mog["run"], mog["epoch"]) == ("swarm-mog-1", 4) and {p.name for p in (root / "mog" / "runs").iterdir()} \
        == {"swarm-mog-1"}
    metrics = (root / "mog" / "runs" / "swarm-mog-1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics] == [0, 1, 2, 3]  # continued, not restarted
    from swarmctl.training.checkpoint import load_checkpoint
    from tools.campaigns import parts

    (tmp_path / "joined").mkdir()
    parts.join(root / "mog" / "last.pt.parts.json", tmp_path / "joined" / "mog.pt")
    assert load_checkpoint(tmp_path / "joined" / "mog.pt").state.epoch == 4
    clustering = json.loads((root / "clustering" / "progress.json").read_text())
    first_four = ["swarm-192-10-1-s0", "set-transformer-32-60-3-s0", "lstm-128-3-s0", "lstm-sorted-64-3-s0"]
    assert sorted(clustering["runs"]) == sorted(first_four)  # smoke: two runs side by side per session
    assert [s["runs"] for s in clustering["sessions"]] == [first_four[:2], first_four[2:]]
    assert (root / "timing.json").is_file() and len((root / "sessions.jsonl").read_text().splitlines()) == 4
    info = json.loads((pretrained / "swarm-image-8-2-1-mnist.json").read_text())
    assert info["eval"]["bits_per_dim"] == mnist["best_bits_per_dim"]
    assert (pretrained / "swarm-image-8-2-1-mnist.pt").is_file()
    report = subprocess.run([sys.executable, "-m", "swarmctl", "report", "--runs-dir",
                             str(root / "clustering" / "runs"), "--out", str(tmp_path / "report")],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    table = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {m} |" in table for m in ("swarm", "set-transformer", "lstm", "lstm-sorted"))

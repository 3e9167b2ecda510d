"""The package as a user gets it: installed non-editably (what a wheel gives), run from another folder,
with no run named, the shipped models answer `sample` and `eval` (the slow test of
tests/test_runs_pretrained.py scores the clustering model on its own dataset)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_non_editable_install_samples_and_evaluates_with_the_shipped_models(tmp_path):
    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "swarmctl", source / "swarmctl", ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True)
    shutil.rmtree(source)  # nothing of the sources is left to fall back on
    assert sorted(p.name for p in (site / "swarmctl" / "pretrained").glob("*.pt")) == sorted([
        "swarm-192-10-1-clustering.pt", "swarm-192-10-1-clustering-broad-16slots.pt", "swarm-image-256-10-1-mnist.pt"])

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SWARMCTL_PRETRAINED")}
    env["PYTHONPATH"] = str(site)

    def swarmctl(*args):
        print(time.strftime("%X"), *args)  # shown when the test fails: where the time went
        return subprocess.run([sys.executable, "-m", "swarmctl", *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)

    where = subprocess.run([sys.executable, "-c", "import swarmctl; print(swarmctl.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(site)  # the installed copy, not the checkout

    r = swarmctl("sample", "--dataset", "mnist", "--per-class", "1", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shipped model" in r.stdout
    assert (work / "runs" / "pretrained-swarm-image-256-10-1-mnist" / "samples-s0.png").is_file()

    r = swarmctl("gen-data", "--tasks", "20", "--n-min", "20", "--n-max", "60", "--out", "small.h5")
    assert r.returncode == 0, r.stdout + r.stderr
    r = swarmctl("eval", "--data", "small.h5", "--device", "cpu")  # scores the shipped model on a small file
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shipped model" in r.stdout
    res = json.loads((work / "runs" / "pretrained-swarm-192-10-1-clustering" / "eval-val.json").read_text())
    assert res["model"] == "swarm" and res["tasks"] == 2 and 0 < res["loss"] < 3
    assert not (work / "data").exists()  # named data: the model's own dataset is not generated

    rows = [f"{x:.3f},{y:.3f}" for x, y in [(i % 7 * 0.1 + 5 * (i % 2), i % 5 * 0.1) for i in range(60)]]
    (work / "pts.csv").write_text("x,y\n" + "\n".join(rows) + "\n")
    r = swarmctl("cluster", "pts.csv")  # the broad-prior model, `cluster`'s default
    assert r.returncode == 0, r.stdout + r.stderr
    assert "swarm-192-10-1-clustering-broad-16slots.pt" in r.stdout
    assert [p.name for p in (work / "runs").glob("pretrained-*/cluster/*")] == ["pts-clusters.csv"]  # as studies

"""shuffle-variance over several runs: results keyed by each run's path (runs of one name in two groups do
not overwrite each other, and --replot draws each), the same run twice refused, and a run that fails after
another was measured leaves no result behind."""

import json

import pytest
from faults import cli, snapshot

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.errors import DataError
from swarmctl.runs import start_run

ARGS = ["--tasks", 2, "--shuffles", 3, "--device", "cpu"]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """Runs g1/x and g2/x: one configuration, two seeds, equal folder names."""
    root = tmp_path_factory.mktemp("groups")
    data = root / "data.h5"
    generate_dataset(data, ClusteringParams(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20),
                     seed=0)
    for group, seed in (("g1", 0), ("g2", 1)):
        start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=1, seed=seed,
                  device="cpu"), DataConfig(path=str(data)), root / "runs", f"{group}/x")
    return root


def test_runs_of_one_name_in_two_groups_keep_their_own_results(groups, tmp_path):
    out = tmp_path / "sv"
    r = cli("shuffle-variance", "g1/x", "g2/x", "--runs-dir", groups / "runs", "--out", out, *ARGS)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.glob("*.npz")) == ["g1__x.npz", "g2__x.npz"]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary) == ["g1__x: swarm (8-2-1)", "g2__x: swarm (8-2-1)"]
    before = snapshot(out)
    r = cli("shuffle-variance", "g1/x", "g2/x", "--runs-dir", groups / "runs", "--out", out, "--replot")
    assert r.exit_code == 0, r.output
    assert "g1__x: swarm (8-2-1)" in r.output and "g2__x: swarm (8-2-1)" in r.output
    assert {k: v for k, v in snapshot(out).items() if k.endswith(".npz")} == \
        {k: v for k, v in before.items() if k.endswith(".npz")}


def test_the_same_run_twice_is_refused(groups, tmp_path):
    before = snapshot(groups)
    r = cli("shuffle-variance", "g1/x", str(groups / "runs" / "g1" / "x"), "--runs-dir", groups / "runs",
            "--out", tmp_path / "sv", *ARGS)
    assert r.exit_code == 2 and "both save their result" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "sv").exists() and snapshot(groups) == before


def test_a_run_failing_after_another_was_measured_leaves_nothing(groups, tmp_path, monkeypatch):
    import swarmctl.studies.shuffle_variance as sv

    real, calls = sv.shuffle_variance_of_run, []

    def second_fails(run, *args, **kwargs):
        calls.append(run)
        if len(calls) == 2:
            raise DataError("the second run's data is unreadable (injected)")
        return real(run, *args, **kwargs)

    monkeypatch.setattr(sv, "shuffle_variance_of_run", second_fails)
    before = snapshot(groups)
    r = cli("shuffle-variance", "g1/x", "g2/x", "--runs-dir", groups / "runs", "--out", tmp_path / "sv", *ARGS)
    assert r.exit_code == 1 and "injected" in r.output, r.output
    assert len(calls) == 2 and not (tmp_path / "sv").exists() and snapshot(groups) == before

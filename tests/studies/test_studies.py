import json
import math
import re

import numpy as np
import pytest

from swarmctl.data.hdf5 import read_split
from swarmctl.errors import ConfigError, DataError, SwarmctlWarning
from swarmctl.runs import load_model
from swarmctl.studies.entropy import choose_task, compute_entropy_map
from swarmctl.studies.report import (
    ConfigSummary,
    RunSummary,
    frontiers,
    on_papers_data,
    paper_number,
    paper_results,
    pareto_front,
    report_markdown,
    summarise,
)
from swarmctl.studies.results import EntropyMapResult, ShuffleVarianceResult, load_result, save_result
from swarmctl.studies.shuffle_variance import measure_shuffle_variance, spread_task_indices


def test_spread_task_indices_cover_the_size_range():
    sizes = np.array([50, 10, 30, 20, 40, 60])
    idx = spread_task_indices(sizes, 3)
    assert sizes[idx].tolist() == [10, 30, 60] or sizes[idx].tolist() == [10, 40, 60]
    assert len(spread_task_indices(sizes, 100)) == 6


@pytest.mark.parametrize(("name", "equivariant"), [("swarm", True), ("lstm", False)])
def test_shuffle_variance_is_rounding_for_equivariant_models_only(trained_runs, name, equivariant):
    runs, data = trained_runs
    model, _ = load_model(runs / name / "best.pt")
    tasks, _ = read_split(data, "val")
    res = measure_shuffle_variance(model, tasks, name, n_tasks=4, n_shuffles=20, seed=0)
    assert len(res.sizes) == 4 and (res.mean > 0).all()
    if equivariant:
        assert res.rel_std.max() < 1e-5
    else:
        assert np.median(res.rel_std) > 1e-3


def test_entropy_map_probabilities_and_entropy_are_valid(trained_runs):
    runs, data = trained_runs
    model, _ = load_model(runs / "swarm" / "best.pt")
    tasks, _ = read_split(data, "val")
    res = compute_entropy_map(model, tasks, 0, "swarm", grid=6, batch_entities=50)
    assert res.probs.shape == (6, 6, 10)
    np.testing.assert_allclose(res.probs.sum(-1), 1.0, atol=1e-9)
    assert (res.entropy >= 0).all() and (res.entropy <= math.log(10) + 1e-9).all()
    assert res.assignment.shape == (tasks.sizes[0],)
    # the batched grid equals one forward pass of the augmented set, done by hand for one location
    import torch

    pts, _ = tasks.task(0)
    star = np.array([[res.grid_x[2], res.grid_y[4]]], dtype=np.float32)
    x = torch.from_numpy(np.concatenate([pts, star]))[None]
    with torch.no_grad():
        q = torch.softmax(model(x, torch.ones(1, len(pts) + 1, dtype=torch.bool))[0, -1].double(), -1).numpy()
    np.testing.assert_allclose(res.probs[4, 2], q, atol=1e-6)


def test_choose_task(trained_runs):
    _, data = trained_runs
    tasks, _ = read_split(data, "val")
    k = int(tasks.n_clusters[1])
    i = choose_task(tasks, None, clusters=k, size=int(tasks.sizes[1]))
    assert tasks.n_clusters[i] == k
    with pytest.raises(ConfigError, match="no task with 9 clusters"):
        choose_task(tasks, None, clusters=9)
    with pytest.raises(ConfigError, match="`index` must be in"):
        choose_task(tasks, 999)


def test_results_round_trip_through_npz(tmp_path):
    r = ShuffleVarianceResult("x", np.arange(3), np.array([5, 6, 7]), np.ones(3), np.full(3, 0.1), 10)
    back = load_result(ShuffleVarianceResult, save_result(r, tmp_path / "r.npz"))
    np.testing.assert_array_equal(back.rel_std, r.rel_std)
    assert back.label == "x" and back.n_shuffles == 10
    with pytest.raises(DataError, match="another study"):
        load_result(EntropyMapResult, tmp_path / "r.npz")


def test_pareto_front_keeps_exactly_the_non_dominated_points():
    pts = [(100, 0.9), (200, 0.8), (150, 0.95), (300, 0.8), (400, 0.5), (50, 1.2), (400, 0.6)]
    assert pareto_front(pts) == [5, 0, 1, 4]


def _row(model, code, params, val):
    return ConfigSummary(model, code, params, (0,), val, 0.0, 1, 1.0, ("cpu",))


def test_frontiers_are_per_family():
    rows = [_row("a", "1", 10, 1.0), _row("a", "2", 20, 1.1), _row("b", "1", 30, 0.5), _row("b", "2", 5, 0.7)]
    f = frontiers(rows)
    assert [r.code for r in f["a"]] == ["1"] and [r.code for r in f["b"]] == ["2", "1"]


def test_summarise_mean_and_std_over_seeds():
    runs = [RunSummary(f"s{s}", "swarm", "8-3-1", 100, s, v, 3, 1.0, "cpu") for s, v in [(0, 1.0), (1, 2.0), (2, 3.0)]]
    (row,) = summarise(runs)
    assert row.seeds == (0, 1, 2) and row.val_mean == 2.0 and row.val_std == pytest.approx(1.0)


def test_the_report_prints_the_papers_table_2_beside_each_configuration():
    """The paper's numbers ship with the package (the paper, sec. 4.1.4 and 4.2): every best.toml configuration
    has its Table 2 entry, and the report puts it beside the run's mean ± std."""
    from pathlib import Path

    from swarmctl.studies.sweep import expand, load_spec

    for run in expand(load_spec(Path(__file__).resolve().parents[2] / "sweeps" / "best.toml")):
        code = run.name[len(run.model.name) + 1 : run.name.rindex("-s")]
        assert paper_number(run.model.name, code) is not None, run.name
    assert (paper_number("swarm", "192-10-1").mean, paper_number("swarm", "192-10-1").std) == (0.416, 0.004)
    assert paper_number("set-linear-max", "96-6").text() == "0.793 ± 0.007"
    assert paper_number("swarm-mog", "768-20-1").mean == 1.4986  # the loss is the negated log-likelihood
    assert paper_number("swarm", "8-3-1") is None
    assert paper_number("swarm-image", "256-10-1") is None  # images: the number depends on the dataset
    assert paper_number("swarm-image", "256-10-1", "fashion-mnist").mean == pytest.approx(2.84 * math.log(2), abs=1e-4)
    for row in paper_results()["rows"]:  # each row's loss is its reported number in the loss's unit
        reported = {"test bits/dim": row["reported"] * math.log(2)}.get(row["metric"], abs(row["reported"]))
        assert row["loss"] == pytest.approx(reported, abs=1e-4), row
    runs = [RunSummary(f"s{s}", "swarm", "192-10-1", 301066, s, v, 90, 10.0, "cuda:0", data_name="clustering-seed0.h5")
            for s, v in [(0, 0.41), (1, 0.42), (2, 0.415)]]
    md = report_markdown(summarise(runs))
    assert "| 0.4150 ± 0.0050 | 0.416 ± 0.004 | 90 | 10.0 | cuda:0 |" in md  # a run from before hardware was recorded


def test_the_papers_number_stands_only_beside_runs_on_the_papers_data():
    """The seed-0 data by its name, or by its checksum under another name; a reduced set (demo-seed0.h5) is not
    it. The MoG task draws its tasks fresh from the paper's generator; image numbers go by the named dataset."""
    checksum = paper_results()["data"]["clustering"]["checksum"]
    assert on_papers_data("swarm", "clustering-seed0.h5") and on_papers_data("lstm", "copy.h5", checksum)
    assert not on_papers_data("swarm", "demo-seed0.h5", "0" * 64) and not on_papers_data("swarm", "copy.h5")
    assert on_papers_data("swarm-mog", "fresh data") and not on_papers_data("swarm-mog", "mog.h5")
    assert on_papers_data("swarm-image", "mnist") and not on_papers_data("no-such-model", "clustering-seed0.h5")

    def runs(data_name, hardware):
        return [RunSummary(f"{data_name}-s{s}", "swarm", "192-10-1", 301066, s, v, 9, 60.0, "cpu", data=data_name,
                           data_name=data_name, hardware=hardware) for s, v in [(0, 0.5), (1, 0.6)]]

    with pytest.warns(SwarmctlWarning, match="different data"):
        rows = summarise(runs("demo-seed0.h5", ("cpu, 1 thread",)) + runs("clustering-seed0.h5", ("NVIDIA H200",)))
    md = report_markdown(rows)
    assert "| demo-seed0.h5 | 301,066 | 2 | 0,1 | 0.5500 ± 0.0707 |  | 9 | 60.0 | cpu, 1 thread |" in md
    assert "| clustering-seed0.h5 | 301,066 | 2 | 0,1 | 0.5500 ± 0.0707 | 0.416 ± 0.004 | 9 | 60.0 | NVIDIA H200 |" \
        in md


def test_cli_studies_and_replot(trained_runs, tmp_path, cli):
    runs, _ = trained_runs
    out = tmp_path / "sv"
    r = cli("shuffle-variance", "swarm", "lstm", "--runs-dir", runs, "--tasks", 3, "--shuffles", 10, "--out", out)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["swarm (8-3-1)"]["max_rel_std"] < 1e-5 and summary["lstm (8-1)"]["median_rel_std"] > 1e-3
    (out / "shuffle-variance.png").unlink()
    assert cli("shuffle-variance", "swarm", "lstm", "--runs-dir", runs, "--out", out, "--replot").exit_code == 0
    assert (out / "shuffle-variance.png").is_file()

    r = cli("plot-entropy", "swarm", "--runs-dir", runs, "--index", 0, "--grid", 5, "--out", tmp_path / "ent")
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "ent").iterdir()} >= {"entropy.npz", "entropy.png", "classes.png"}
    r = cli("plot-entropy", "swarm", "--runs-dir", runs, "--out", tmp_path / "none", "--replot")
    assert r.exit_code == 1 and "no saved result" in r.output

    r = cli("report", "--runs-dir", runs, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| swarm | (8-3-1) |" in md and (tmp_path / "rep" / "frontier.png").is_file()
    hardware = json.loads((runs / "swarm" / "config.json").read_text())["run"]["hardware"]  # what train recorded
    assert re.fullmatch(r"cpu, \d+ threads?", hardware[0]) and len(hardware) == 1, hardware
    assert f"| {hardware[0]} |" in md
    assert cli("report", "--runs-dir", tmp_path / "empty").exit_code == 1

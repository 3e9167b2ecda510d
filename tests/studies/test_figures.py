"""What the figures are given to draw: the frontier's panels (one per dataset, the paper's points only on the
paper's data), its error bars and legend, the entropy map's matched colours, the samples' grid."""

import numpy as np
import pytest

from swarmctl.plots.entropy import match_clusters
from swarmctl.plots.frontier import plot_frontier
from swarmctl.plots.samples import plot_samples, sample_canvas
from swarmctl.studies.report import ConfigSummary, RunSummary, frontier_panels, paper_points, summarise


def _runs(model, code, params, losses, data_name="clustering-seed0.h5", hardware=("cpu, 1 thread",)):
    return [RunSummary(f"{model}-{code}-s{s}", model, code, params, s, v, 3 + s, 1.0 + s, "cpu", data=data_name,
                       data_name=data_name, hardware=hardware) for s, v in enumerate(losses)]


def _stars(ax):
    return [tuple(line.get_xydata()[0]) for line in ax.get_lines() if line.get_marker() == "*"]


def test_the_frontier_draws_an_error_bar_only_where_there_are_two_seeds():
    rows = summarise(_runs("swarm", "8-3-1", 100, [0.5]) + _runs("lstm", "8-1", 200, [0.6, 0.7, 0.8]))
    assert {r.model: r.error for r in rows} == {"swarm": None, "lstm": pytest.approx(0.1)}
    (ax,) = plot_frontier(frontier_panels(rows)).axes
    bars = [c for c in ax.containers if c.has_yerr]
    drawn = [np.asarray(seg).tolist() for c in bars for seg in c.lines[2][0].get_segments()]  # (x, y -/+ std)
    assert drawn == [[[200.0, pytest.approx(0.6)], [200.0, pytest.approx(0.8)]]]  # lstm's 3 seeds; swarm's 1: none


def test_the_frontier_marks_the_papers_points_for_the_families_it_shows():
    rows = summarise(_runs("swarm", "8-3-1", 100, [0.5]))
    paper = paper_points(rows)
    assert [(p.code, p.parameters, p.loss) for p in paper["swarm"]] == [("192-10-1", 301066, 0.416)]
    assert set(paper) == {"swarm"}  # no other family's
    (ax,) = plot_frontier(frontier_panels(rows)).axes
    assert _stars(ax) == [(301066.0, 0.416)]
    assert "paper" in next(line for line in ax.get_lines() if line.get_marker() == "*").get_label()
    image = ConfigSummary("swarm-image", "256-10-1", 10, (0,), 1.0, 0.0, 1, 1.0, ("cpu",), data="fashion-mnist",
                          dataset="fashion-mnist")
    assert [p.loss for p in paper_points([image])["swarm-image"]] == [pytest.approx(1.9685)]


def test_the_frontier_puts_the_papers_points_only_beside_runs_on_the_papers_data(recwarn):
    """Runs on a reduced set (demo-seed0.h5) get a panel of their own that says so, without the paper's stars;
    each panel's title names its data, and each family's legend its hardware, net minutes and epochs."""
    rows = summarise(_runs("swarm", "8-3-1", 100, [0.5, 0.6], hardware=("NVIDIA H200",))
                     + _runs("swarm", "8-3-1", 100, [0.4], data_name="demo-seed0.h5"))
    first, second = plot_frontier(frontier_panels(rows), "title").axes
    assert first.get_title().startswith("clustering-seed0.h5: the paper's data (seed 0, 10,000 tasks")
    assert second.get_title() == "demo-seed0.h5: not the paper's data (no paper points)"
    assert _stars(first) == [(301066.0, 0.416)] and _stars(second) == []
    assert [t.get_text() for t in first.get_legend().get_texts()] == [
        "swarm (NVIDIA H200): 1.5 net min, 4 epochs", "swarm (paper)"]  # means over the two seeds
    assert [t.get_text() for t in second.get_legend().get_texts()] == ["swarm (cpu, 1 thread): 1.0 net min, 3 epochs"]
    assert not rows[0].paper_data and rows[1].paper_data  # the demo row is the better one: sorted first


def test_match_clusters_colours_each_class_as_the_true_cluster_it_overlaps_most():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    assignment = np.array([3, 3, 1, 0, 0, 1, 1, 1])  # class 3 ~ cluster 0, class 0 ~ cluster 1, class 1 ~ 2
    colour = match_clusters(labels, assignment, 5)
    assert colour[[3, 0, 1]].tolist() == [0, 1, 2]
    assert sorted(colour.tolist()) == [0, 1, 2, 3, 4]  # the unused classes take colours no cluster has
    same = np.array([0, 1, 2, 2])
    assert match_clusters(same, same, 3).tolist() == [0, 1, 2]


def test_samples_are_a_near_square_grid_with_a_column_per_class():
    images = np.zeros((10, 2, 1, 28, 28), dtype=np.uint8)
    for k in range(10):
        images[k, :, 0, 0, 0] = 10 + k  # each image marks its class
    canvas, cols = sample_canvas(images)
    assert cols == 5 and canvas.shape == (4 * 30, 5 * 30, 1)  # two bands of five classes, two samples each
    for k in range(10):
        band, col = divmod(k, 5)
        for s in range(2):
            assert canvas[(band * 2 + s) * 30 + 1, col * 30 + 1, 0] == 10 + k
    fig = plot_samples(images)
    assert [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes] == [list("01234"), list("56789")]
    width, height = fig.get_size_inches()
    assert 0.5 < height / width < 2
    assert sample_canvas(np.zeros((10, 10, 1, 4, 4), dtype=np.uint8))[1] == 10  # ten samples: one band

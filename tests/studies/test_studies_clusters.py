"""When `swarmctl cluster` warns (swarmctl.studies.clusters.cluster_warnings), and its figure's limits and
legend (swarmctl.plots.clusters)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swarmctl.data.clustering_generator import TrainingRange
from swarmctl.studies.clusters import cluster_warnings
from swarmctl.tasks.point_clusters import PointClusters

PAPER = TrainingRange(n_min=100, n_max=1000, k_min=3, k_max=10, spread_lo=0.1, spread_hi=0.77)


def _blobs(k: int, n_each: int, sd: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.RandomState(seed)
    centres = np.stack([np.cos(np.arange(k) * 2 * np.pi / k), np.sin(np.arange(k) * 2 * np.pi / k)], 1) * 3
    labels = np.repeat(np.arange(k), n_each)
    return centres[labels] + sd * rs.randn(len(labels), 2), labels


def _clusters(labels: np.ndarray, probability: float | np.ndarray = 0.99, slots: int = 10) -> PointClusters:
    sizes = np.bincount(labels)
    prob = np.broadcast_to(np.asarray(probability, dtype=float), labels.shape).copy()
    return PointClusters(labels, prob, np.zeros(len(labels)), sizes, np.ones(len(sizes)), None, False, None, slots)


def test_a_clean_result_inside_the_training_range_has_no_warning():
    x, labels = _blobs(4, 100, 0.6)
    assert cluster_warnings(x, _clusters(labels), PAPER) == ()


@pytest.mark.parametrize(("case", "needle"), [
    ("cap", "the most it can give"),
    ("cap before refining", "the most it can give"),
    ("off centre", "from the origin"),
    ("unsure", "unsure"),
    ("few points", "points per set"),
    ("many points", "points per set"),
    ("one cluster", "clusters per set"),
    ("broad", "broader"),
    ("tight", "tighter"),
    ("raw units", "used as given"),
    ("split", "one Gaussian than by two"),
    ("stray points", "too few to tell a cluster"),
    ("repeated points", "too few to tell a cluster"),
])
def test_each_reason_not_to_trust_a_result_gives_one_warning(case, needle):
    x, labels = _blobs(4, 100, 0.6)
    kwargs = {}
    clusters = _clusters(labels)
    if case == "cap":
        x, labels = _blobs(10, 50, 0.3)
        clusters = _clusters(labels)
    elif case == "cap before refining":  # the model filled its 10 slots, the refinement merged them to 4
        kwargs = {"model_clusters": 10}
    elif case == "off centre":  # the training spread, far from the origin
        x = x - x.mean(axis=0) + [100.0, 0.0]
        kwargs = {"as_given_scale": float(np.sqrt(np.mean(np.var(x, axis=0))))}
    elif case == "unsure":
        clusters = _clusters(labels, np.where(np.arange(len(labels)) % 3 == 0, 0.4, 0.9))
    elif case == "few points":
        x, labels = _blobs(4, 20, 0.6)
        clusters = _clusters(labels)
    elif case == "many points":
        x, labels = _blobs(4, 300, 0.6)
        clusters = _clusters(labels)
    elif case == "one cluster":
        x, labels = _blobs(4, 100, 0.6)
        labels = np.zeros_like(labels)
        clusters = _clusters(labels)
    elif case == "broad":
        x, labels = _blobs(4, 100, 3.0)
        clusters = _clusters(labels)
    elif case == "tight":
        x, labels = _blobs(4, 100, 0.05)
        clusters = _clusters(labels)
    elif case == "split":  # the first blob cut in two by a line through its centre
        labels = np.where((labels == 0) & (x[:, 1] > 0), 4, labels)
        clusters = _clusters(labels)
    elif case == "repeated points":  # a cluster of 40 rows on 2 distinct points (rounded values)
        x, labels = x.copy(), labels.copy()
        x[:40] = np.where(np.arange(40)[:, None] % 2 == 0, x[0], x[1])
        labels[:40] = 4
        clusters = _clusters(labels)
    elif case == "stray points":  # two clusters of 3 and 6 points split off a 100-point blob
        labels = labels.copy()
        labels[:3], labels[3:9] = 4, 5
        clusters = _clusters(labels)
    else:
        x = x * 1000
        kwargs = {"as_given_scale": 0.93}
    got = cluster_warnings(x, clusters, PAPER, **kwargs)
    assert len([w for w in got if needle in w]) == 1, got
    if case not in ("one cluster", "broad"):  # a set of one broad cluster is also broad, and so on
        assert len(got) == 1, got


def test_the_figure_keeps_its_limits_on_the_data_and_its_legend_off_the_points():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from swarmctl.plots.clusters import plot_clusters

    rs = np.random.RandomState(0)
    x = np.column_stack([rs.uniform(0, 2, 500), rs.uniform(0, 10, 500)])  # five times taller than wide
    labels = (x[:, 0] > 50).astype(int)
    fig = plot_clusters(x, ("a", "b"), labels, np.full(500, 0.9), "t")
    ax = fig.axes[0]
    FigureCanvasAgg(fig).draw()  # an aspect is applied when drawn
    for (lo, hi), col in ((ax.get_xlim(), x[:, 0]), (ax.get_ylim(), x[:, 1])):
        span = col.max() - col.min()
        assert col.min() - 0.1 * span <= lo <= col.min() and col.max() <= hi <= col.max() + 0.1 * span
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())


def test_the_training_range_follows_the_models_cluster_slots():
    """A model with the paper's 10 slots was trained on the paper's generator; one with 16 on the broad prior
    and the paper's tasks."""
    from swarmctl.config import ModelConfig
    from swarmctl.tasks.clustering import ClusteringTask

    paper, broad = (ClusteringTask().training_range(ModelConfig(dim_out=d)) for d in (10, 16))
    assert (paper.n_min, paper.n_max, paper.k_min, paper.k_max) == (100, 1000, 3, 10)
    assert (broad.n_min, broad.n_max, broad.k_min, broad.k_max) == (50, 1000, 1, 16)
    assert broad.spread_lo < paper.spread_lo < paper.spread_hi <= broad.spread_hi


def test_one_clean_cluster_is_not_called_broad():
    """One cluster's spread relative to the whole set is about 1 by definition: no spread warning."""
    broad = TrainingRange(n_min=50, n_max=1000, k_min=1, k_max=16, spread_lo=0.01, spread_hi=0.77)
    x = np.random.RandomState(0).randn(300, 2)
    assert cluster_warnings(x, _clusters(np.zeros(300, dtype=int)), broad) == ()


def test_a_number_of_clusters_given_is_not_blamed_on_the_model():
    """With K given (`--clusters`), EM made K clusters: neither the model's cap nor its training range of K
    applies; the other warnings still do."""
    x, labels = _blobs(12, 30, 0.15)
    clusters = _clusters(labels, slots=10)
    found = cluster_warnings(x, clusters, PAPER, refined=True, model_clusters=10)
    assert any("cluster slots" in w for w in found) and any("12 clusters found" in w for w in found), found
    given = cluster_warnings(x, clusters, PAPER, refined=True, model_clusters=10, given_clusters=12)
    assert not any("cluster slots" in w or "clusters found" in w for w in given), given
    unsure = cluster_warnings(x, _clusters(labels, probability=0.3), PAPER, refined=True, given_clusters=12)
    assert any("unsure" in w for w in unsure), unsure


@pytest.mark.parametrize(("n", "found", "largest", "warned"), [
    (3, 1, 1, "the points may hold more clusters than the 1 found"),
    (12, 2, 1, "the 2 clusters are the model's, not checked against more"),
    (480, 8, 68, None),
    (480, 8, 0, None),  # no search: the model's slots are the limit, warned of apart
])
def test_a_search_capped_by_the_sets_size_says_so(n, found, largest, warned):
    """A 3-point set was told "the largest number of clusters it tried (1), the BIC still falling", a 12-point
    one "(2)" after a search of 1 alone: it was the set's size that capped the search."""
    x, labels = _blobs(found, n // found, 0.1)
    got = cluster_warnings(x, _clusters(labels, slots=16), PAPER, refined=True, largest=largest,
                           search_points=n)
    capped = [w for w in got if "the set's size capped" in w]
    assert not any("largest number" in w for w in got), got
    if warned is None:
        assert not capped, got
    else:
        assert len(capped) == 1 and warned in capped[0] and f"at {largest} cluster" in capped[0], got
        assert f"{n} points;" in capped[0] and "a cluster needs 7 or more in 2 dimensions" in capped[0], got
        given = cluster_warnings(x, _clusters(labels, slots=16), PAPER, refined=True, largest=largest,
                                 given_clusters=found)
        assert not any("capped" in w for w in given), given


def test_a_search_past_the_models_slots_is_not_blamed_on_them():
    """25 clusters from a 16-slot model's start, by the refinement's search: neither the slots nor the model's
    training range of K is a reason to doubt them; without a search (`no_refine`) both are."""
    x, labels = _blobs(25, 40, 0.05)
    broad = TrainingRange(n_min=50, n_max=1000, k_min=1, k_max=16, spread_lo=0.001, spread_hi=0.77)
    searched = cluster_warnings(x, _clusters(labels, slots=16), broad, refined=True, model_clusters=16,
                                largest=142, search_points=1000)
    assert searched == (), searched
    alone = cluster_warnings(x[labels < 16], _clusters(labels[labels < 16], slots=16), broad, model_clusters=16)
    assert any("cluster slots" in w for w in alone), alone


def test_fewer_clusters_than_given_says_so():
    """`clusters` 1000 on 1,000 distinct points came back with 850 clusters and no word of it."""
    x, labels = _blobs(10, 30, 0.1)
    got = cluster_warnings(x, _clusters(labels), PAPER, refined=True, given_clusters=12)
    assert any("EM kept 10 of the 12 clusters given" in w and "`clusters`" in w for w in got), got
    assert not any("clusters given" in w for w in cluster_warnings(x, _clusters(labels), PAPER, refined=True,
                                                                   given_clusters=10))


def _counts(**probability) -> np.ndarray:
    """A count head's distribution over 1..16 clusters: ``k2=0.9`` puts 0.9 on 2, the rest spread evenly."""
    p = np.zeros(16)
    for key, value in probability.items():
        p[int(key[1:]) - 1] = value
    rest = 1.0 - p.sum()
    return np.where(p > 0, p, rest / (p == 0).sum())


def _refined(x: np.ndarray, labels: np.ndarray):
    from swarmctl.tasks.mixtures import refine

    resp = 0.9 * np.eye(labels.max() + 1)[labels] + 0.1 / (labels.max() + 1)
    return resp, refine(x, resp)


def test_the_models_count_decides_k_where_the_bic_hardly_tells():
    """Two heavily overlapping Gaussians: the BIC alone prefers one; a model sure of two gets two."""
    from swarmctl.studies.clusters import choose_k, made_by, shape_warnings

    rs = np.random.RandomState(3)
    y = rs.rand(600) < 0.5
    x = rs.randn(600, 2) + np.stack([1.5 * y, 0 * y], axis=1)
    resp, fit = _refined(x, y.astype(int))
    assert len(fit.mixture) == 1
    chosen = choose_k(x, resp, fit, _counts(k2=0.9))
    assert len(chosen.mixture) == 2 and chosen.counts[1] == pytest.approx(0.9)
    assert "by the model's count and BIC" in made_by("m", True, chosen, None, 2)
    assert [w for w in shape_warnings(chosen, 2) if "1 cluster fit better by BIC" in w]  # the count overruled it
    assert len(choose_k(x, resp, fit, _counts(k1=0.9)).mixture) == 1


def test_the_bic_overrules_a_count_it_refutes():
    """Six well-separated blobs: a model that says two is outvoted by a BIC thousands of points apart."""
    from swarmctl.studies.clusters import choose_k

    x, labels = _blobs(6, 80, 0.2)
    resp, fit = _refined(x, labels)
    assert len(choose_k(x, resp, fit, _counts(k2=0.95)).mixture) == 6


def _overlapping_pair(seed: int = 0, apart: float = 1.5):
    rs = np.random.RandomState(seed)
    y = rs.rand(600) < 0.5
    return rs.randn(600, 2) + np.stack([apart * y, 0 * y], axis=1), y.astype(int)


def test_the_chosen_partition_is_a_candidates_whatever_the_order_of_the_points():
    """choose_k returns one of the fits it weighed (here EM at the count's 2 clusters, not the BIC's 1), and the
    same partition for the points in any order."""
    from swarmctl.studies.clusters import choose_k
    from swarmctl.tasks.mixtures import fit_k, refine

    x, y = _overlapping_pair(3)
    resp, fit = _refined(x, y)
    chosen = choose_k(x, resp, fit, _counts(k2=0.9))
    assert np.array_equal(chosen.resp.argmax(axis=1), fit_k(x, resp, 2).resp.argmax(axis=1))
    order = np.random.RandomState(0).permutation(len(x))
    again = choose_k(x[order], resp[order], refine(x[order], resp[order]), _counts(k2=0.9))
    pairs = set(zip(again.resp.argmax(axis=1).tolist(), chosen.resp.argmax(axis=1)[order].tolist(), strict=True))
    assert len(again.mixture) == 2 and len(pairs) == 2


def test_a_count_unsure_of_well_separated_blobs_is_not_weak_evidence():
    """The count head is unsure on most sets (under 0.5 for its K on 52 of 60 broad-prior tasks): the evidence
    is what the count and the BIC give K together, and three separated blobs leave the BIC no doubt."""
    from swarmctl.studies.clusters import choose_k, shape_warnings

    x, labels = _blobs(3, 100, 0.3)
    resp, fit = _refined(x, labels)
    unsure = choose_k(x, resp, fit, _counts(k3=0.4, k4=0.35))
    assert len(unsure.mixture) == 3 and unsure.posterior[0][0] == 3
    assert not [w for w in shape_warnings(unsure, 3) if "evidence" in w]


def test_a_k_the_count_and_the_bic_give_less_than_even_odds_is_weak_evidence():
    from swarmctl.studies.clusters import shape_warnings

    x, labels = _blobs(3, 100, 0.3)
    fit = replace(_refined(x, labels)[1], counts=tuple(_counts(k3=0.4)), posterior=((3, 0.4), (4, 0.35), (2, 0.25)))
    (line,) = [w for w in shape_warnings(fit, 3) if "evidence" in w]
    assert "probability 0.40" in line and "4 clusters 0.35" in line


@pytest.mark.parametrize("count", [{"k1": 0.9}, {"k1": 0.45, "k2": 0.45}])
def test_two_heavily_overlapping_gaussians_are_weak_evidence_whatever_the_count(count):
    """A count head sure of one cluster silenced the check that one cluster's points are flatter than a
    Gaussian's: two unit Gaussians 1.5 apart came back as one with no warning (0 of 12 sets)."""
    from swarmctl.studies.clusters import choose_k, shape_warnings

    x, y = _overlapping_pair(0)
    resp, fit = _refined(x, y)
    chosen = choose_k(x, resp, fit, _counts(**count))
    assert len(chosen.mixture) == 1
    assert any(w.startswith("the evidence for 1 cluster is weak") for w in shape_warnings(chosen, 1))

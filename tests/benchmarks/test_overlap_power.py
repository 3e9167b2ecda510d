"""benchmarks/overlap_power.py's numbers rest on its statistic being the rule's, on the kurtosis a pair of unit
Gaussians d apart has in theory (3 - d^4 / (8 (1 + d^2/4)^2) along their axis), and on its likelihood-ratio test
being at least as powerful as the rule at the same false-alarm rate (Neyman-Pearson)."""

import sys
from pathlib import Path

import numpy as np

from swarmctl.tasks.mixtures import FLAT_Z, Mixture, shapes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
try:
    import overlap_power as op
finally:
    sys.path.pop(0)


def test_the_statistic_is_the_rules_and_centred_where_theory_says():
    rs = np.random.RandomState(0)
    n, d = 800, 1.5
    one, _ = op.draw(rs, 400, n, 0.0, 20.0)
    pair, _ = op.draw(rs, 400, n, d)
    for pts in one[:30]:  # the rule's verdict on each set, from its one-Gaussian fit
        fit = Mixture(np.ones(1), pts.mean(0)[None], np.cov(pts, rowvar=False, bias=True)[None])
        assert shapes(pts, fit, np.ones((n, 1))).flat == (op.flatness(pts[None])[0] < -FLAT_Z)
    deficit = d**4 / (8 * (1 + d * d / 4) ** 2)  # 0.259: the pair's kurtosis below 3 along its axis
    se = np.sqrt(24 / n)
    assert abs(op.flatness(one).mean()) < 0.15  # a Gaussian, however elongated: no deficit
    assert abs(op.flatness(pair).mean() + deficit / se) < 0.15  # -1.50 standard errors at 800 points


def test_the_best_test_catches_at_least_as_many_pairs_as_the_rule_at_its_false_alarm_rate():
    rs = np.random.RandomState(1)
    n, d = 600, 1.5
    one, _ = op.draw(rs, 2000, n, 0.0)
    pair, along = op.draw(rs, 2000, n, d)
    alarm = np.mean(op.flatness(one) < -FLAT_Z)
    rule = np.mean(op.flatness(pair) < -FLAT_Z)
    lr_one = op.oracle(op.draw(rs, 2000, n, 0.0, np.sqrt(1 + d * d / 4))[1], d)
    best = np.mean(op.oracle(along, d) > np.quantile(lr_one, 1 - alarm))
    assert 0.02 < alarm < 0.1 and 0.25 < rule < 0.6
    assert best >= rule - 0.03  # a little sampling noise of 2,000 sets

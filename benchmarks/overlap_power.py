"""How often `cluster`'s one-cluster flatness test (swarmctl.tasks.mixtures.shapes: the kurtosis along the
fitted Gaussian's long axis, more than FLAT_Z standard errors sqrt(24/n) below 3, warns that the evidence for
1 cluster is weak) fires on sets of 400..800 points: one Gaussian (round, or elongated 1:20), and two unit
Gaussians d standard deviations apart (equal weights), per threshold. Beside it, the power of the best test
there is at the same false-alarm rate: the likelihood ratio of the true pair against one Gaussian, told the
axis, the means and the scale (Neyman-Pearson), along the axis.

With ``--command N``, the whole of `cluster` too (the benchmark's default model, refined; K by BIC): on how
many of N sets per group (3 N pairs 1.5 apart) it warns that the evidence for its K is weak, and the BIC's
margin of 1 cluster over 2 (BIC(2) - BIC(1), on the search's points), for such pairs turned and scaled at
random, single Gaussians of 30..2,000 points (round, 1:3, 1:20) and pairs 3 and 4 apart.

    python benchmarks/overlap_power.py [--sets 4000] [--command 40]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from swarmctl.tasks.mixtures import FLAT_Z, Mixture, shapes

WEAK = "the evidence for"  # the weak-evidence warning's first words

SIZES = np.arange(400, 801, 50)


def flatness(x: np.ndarray) -> np.ndarray:
    """(R,) the rule's statistic for R sets (R, n, 2): the kurtosis along the long axis of each set's fitted
    Gaussian, minus 3, in standard errors sqrt(24/n)."""
    c = x - x.mean(axis=1, keepdims=True)
    axis = np.linalg.eigh(np.einsum("rni,rnj->rij", c, c) / c.shape[1])[1][:, :, -1]
    z = np.einsum("rni,ri->rn", c, axis)
    return (np.mean(z**4, axis=1) / np.mean(z**2, axis=1) ** 2 - 3.0) / np.sqrt(24.0 / c.shape[1])


def draw(rs: np.random.RandomState, sets: int, n: int, d: float, ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(points (sets, n, 2), each point's coordinate along the pair's axis): one Gaussian stretched ``ratio``:1
    (d = 0) or two unit Gaussians ``d`` apart, turned by a random angle."""
    side = rs.rand(sets, n) < 0.5
    along = rs.randn(sets, n) * ratio + np.where(side, d / 2, -d / 2)
    x = np.stack([along, rs.randn(sets, n)], axis=2)
    a = rs.uniform(0, np.pi, sets)
    turn = np.stack([np.stack([np.cos(a), np.sin(a)], 1), np.stack([-np.sin(a), np.cos(a)], 1)], 1)  # (sets, 2, 2)
    return np.einsum("rnj,rjk->rnk", x, turn), along


def oracle(along: np.ndarray, d: float) -> np.ndarray:
    """(R,) the log-likelihood ratio of two unit Gaussians at -d/2, d/2 against the one Gaussian of their
    variance, summed over each set's points along the axis."""
    pair = np.logaddexp(stats.norm.logpdf(along, -d / 2), stats.norm.logpdf(along, d / 2)) - np.log(2)
    return (pair - stats.norm.logpdf(along, 0, np.sqrt(1 + d * d / 4))).sum(axis=1)


def command(sets: int, rs: np.random.RandomState) -> None:
    """The whole of `cluster` on ``sets`` sets per group: K found, weak-evidence warnings, the BIC's margin."""
    import torch
    from cluster_vs_em import CPU, TASK

    from swarmctl.runs import load_model
    from swarmctl.studies.clusters import cluster_values, default_model, values_warnings

    torch.set_num_threads(1)
    model, checkpoint = load_model(default_model(), CPU)
    groups = {"pair, d = 1.5, 400..800": (1.5, 1.0, 400, 801)}
    groups |= {f"one Gaussian 1:{r}, {n}": (0.0, float(r), n, n + 1) for n in (30, 100, 400, 800, 2000)
               for r in (1, 3, 20)}
    groups |= {f"pair, d = {d}, 400..800": (float(d), 1.0, 400, 801) for d in (3, 4)}
    print("\n| sets | K found (sets) | weak evidence | BIC(2) - BIC(1): 5/50/95 % |\n|---|---|---|---|")
    for name, (d, ratio, lo, hi) in groups.items():
        found, weak, margin = [], 0, []
        count = 3 * sets if d == 1.5 else sets
        for _ in range(count):
            x = draw(rs, 1, rs.randint(lo, hi), d, ratio)[0][0] * rs.uniform(0.5, 5)
            clusters, model_k, fit = cluster_values(TASK, model, x, CPU)
            warned = values_warnings(TASK, checkpoint.model_config, x, clusters, model_k, fit)
            found.append(len(clusters.sizes))
            weak += any(w.startswith(WEAK) for w in warned)
            scores = dict(fit.scores)
            margin += [scores[2] - scores[1]] if 1 in scores and 2 in scores else []
        ks = ", ".join(f"{k}: {c}" for k, c in zip(*np.unique(found, return_counts=True), strict=True))
        q = " / ".join(f"{v:.0f}" for v in np.quantile(margin, [0.05, 0.5, 0.95])) if margin else "-"
        print(f"| {name} | {ks} | {weak} of {count} | {q} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=4000, help="sets per group (spread over 400..800 points)")
    ap.add_argument("--command", type=int, default=0, help="sets per group for the whole command (0: none)")
    args = ap.parse_args()
    rs = np.random.RandomState(8)
    per = max(1, args.sets // len(SIZES))
    groups = {"one Gaussian": (0.0, 1.0), "one Gaussian, 1:20": (0.0, 20.0), "pair, d = 1.5": (1.5, 1.0),
              "pair, d = 2": (2.0, 1.0)}
    z, lr = {}, {}
    for name, (d, ratio) in groups.items():
        drawn = [draw(rs, per, n, d, ratio) for n in SIZES]
        z[name] = np.concatenate([flatness(x) for x, _ in drawn])
        if name == "one Gaussian":  # the statistic is the rule's: its verdict, on the first sets of each size
            for x, _ in drawn:
                for pts in x[:20]:
                    fit = Mixture(np.ones(1), pts.mean(0)[None], np.cov(pts, rowvar=False, bias=True)[None])
                    assert shapes(pts, fit, np.ones((len(pts), 1))).flat == (flatness(pts[None])[0] < -FLAT_Z)
        if d == 1.5:
            lr["one"] = np.concatenate([oracle(draw(rs, per, n, 0.0, np.sqrt(1 + d * d / 4))[1], d) for n in SIZES])
            lr["pair"] = np.concatenate([oracle(a, d) for _, a in drawn])
    print(f"{per * len(SIZES)} sets per group, 400..800 points; the statistic's quantiles (5/25/50/75/95 %):")
    for name, values in z.items():
        print(f"  {name}: " + " ".join(f"{q:+.2f}" for q in np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])))
    print("\n| warns below | " + " | ".join(z) + " |\n" + "|---" * (len(z) + 1) + "|")
    for t in (2.0, FLAT_Z, 1.0, 0.5, 0.0):
        mark = " (the rule)" if t == FLAT_Z else ""
        print(f"| {-t or 0.0:g}{mark} | " + " | ".join(f"{np.mean(v < -t):.1%}" for v in z.values()) + " |")
    alarm = float(np.mean(z["one Gaussian"] < -FLAT_Z))
    cut = np.quantile(lr["one"], 1 - alarm)
    print(f"\nthe best test (told the axis, means and scale) at the rule's false-alarm rate {alarm:.1%} on one "
          f"Gaussian: {np.mean(lr['pair'] > cut):.1%} of the pairs 1.5 apart")
    if args.command:
        command(args.command, rs)


if __name__ == "__main__":
    main()

"""Could another rule for K, or better candidate partitions, lift `swarmctl cluster` on real data? Each set's
candidate EM fits, scored by several rules side by side with today's answer (docs/cluster.md, "Other rules
for K, measured").

    python benchmarks/cluster_candidates.py [--sets 4] [--floor] [--data data/clustering-seed0.h5] [--json out.json]

Per set: the default model's probabilities, today's answer (`cluster_values`, no K) and the numbers of
clusters its search fitted. At those numbers K, a pool of EM fits (in the refinement's scaled coordinates,
to its search tolerance) for each covariance type (full, diagonal, spherical, tied: the M-step's full
covariance projected, so each is its type's maximum-likelihood step) from each of four starts (the model's
answer cut to K as `--clusters K` seeds it, and three k-means++ partitions). ``--floor`` adds the variance
of rounding, h^2/12 (h: the median gap between a coordinate's distinct values), to every covariance: rounded
measurements (iris, to 0.1 cm) then give no component a stack of repeated points. The rules:

- ``full/km0``, ``full/model``, ``full/best4``: full covariances, one k-means++ start, the model's start, or
  the best log-likelihood of the four starts, K by BIC;
- ``4 types/km0``, ``4 types/best4``: (K, covariance type) by BIC, mclust's way, with each type's
  parameters counted (:func:`n_parameters`);
- ``full/ICL``, ``4 types/ICL``: the integrated completed likelihood (BIC plus twice the entropy of the
  responsibilities) instead of BIC;
- ``merge full``, ``merge 4 types``: the BIC's fit, its components merged two at a time (the pair whose union
  lowers the entropy most) down to ICL's K (Baudry et al. 2010, combining mixture components);
- ``oracle full``, ``oracle 4 types``: the pool's partition of the best ARI, chosen knowing the labels (what
  no rule over this pool can beat);
- with ``--variants``, today's refinement itself changed (for this measurement only, by replacing its EM
  step and covariance floor while it runs): ``today+floor`` (the rounding floor as its covariance floor),
  ``today+best4`` (each fresh fit of its search the best of four k-means++ starts by likelihood), and both.

Synthetic families as in ``cluster_vs_em.py`` (the seed-0 validation split, broad and wide prior,
make_blobs, shapes), in two halves of ``--sets`` each: ``tune`` and ``held`` (other seeds), so a rule
tuned on one half is checked on the other. Printed: mean ARI / sets with K exact / sets over 2K, per group.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from cluster_vs_em import CPU, TASK, blob_sets, broad_sets, real_sets, shape_sets, validation_sets
from sklearn.metrics import adjusted_rand_score

from swarmctl.data.clustering_generator import WIDE_PRIOR
from swarmctl.runs import load_model
from swarmctl.studies.clusters import MODEL_POINTS, cluster_values, default_model
from swarmctl.tasks import mixtures as mx

TYPES = ("full", "diag", "spherical", "tied")
STARTS = ("model", "km0", "km1", "km2")
ALL, FULL = TYPES, ("full",)


def n_parameters(k: int, d: int, kind: str) -> int:
    """Free parameters of a mixture of ``k`` Gaussians in ``d`` dimensions whose covariances are ``kind``."""
    cov = {"full": k * d * (d + 1) // 2, "diag": k * d, "spherical": k, "tied": d * (d + 1) // 2}[kind]
    return (k - 1) + k * d + cov


def m_step(x: np.ndarray, resp: np.ndarray, kind: str, floor: float) -> mx.Mixture:
    mix = mx.m_step(x, resp, 0.0)
    covs, d = mix.covs, x.shape[1]
    if kind == "diag":
        covs = np.einsum("kii->ki", covs)[:, :, None] * np.eye(d)[None]
    elif kind == "spherical":
        covs = (np.einsum("kii->k", covs) / d)[:, None, None] * np.eye(d)[None]
    elif kind == "tied":
        covs = np.broadcast_to(np.einsum("k,kij->ij", mix.weights, covs), covs.shape).copy()
    return mx.Mixture(mix.weights, mix.means, covs + floor * np.eye(d)[None])


def fit(x: np.ndarray, resp: np.ndarray, kind: str, floor: float) -> tuple[mx.Mixture, np.ndarray, float]:
    """EM of covariance ``kind`` from ``resp`` to the search's tolerance: (mixture, resp, total log-likelihood)."""
    least = mx.min_points(x.shape[1])
    resp = mx._drop_empty(resp, least)[0]
    mix, history = m_step(x, resp, kind, floor), []
    for _ in range(mx.MAX_ITER):
        resp, ll = mx.e_step(x, mix)
        history.append(ll)
        if len(history) > 1 and history[-1] - history[-2] < mx.SEARCH_TOL:
            break
        mix = m_step(x, mx._drop_empty(resp, least)[0], kind, floor)
    return mix, resp, history[-1] * len(x)


def rounding_floor(x: np.ndarray) -> float:
    """h^2 / 12, the variance of rounding to a step h (the median gap between distinct values), mean over the
    coordinates."""
    return float(np.mean([np.median(np.diff(np.unique(c))) ** 2 / 12 if len(np.unique(c)) > 1 else 0.0
                          for c in x.T]))


def entropy(resp: np.ndarray) -> float:
    return float(-(resp * np.log(np.maximum(resp, 1e-300))).sum())


def pool(x: np.ndarray, probs: np.ndarray, rows: np.ndarray | None, ks: set[int], floor: bool) -> list[dict]:
    """Every (K, type, start) fit, labels in the caller's order."""
    pts = mx._SortedPoints.of(x, probs, rows)
    z, (n, d) = pts.x, pts.x.shape
    var = max(mx.REG, rounding_floor(x) * (pts.unit.scale[0] * pts.robust) ** 2) if floor else mx.REG
    given, resp = z[pts.given], mx._drop_empty(pts.resp, mx.min_points(d))[0]
    rs, out = np.random.RandomState(0), []
    for k in sorted(ks):
        cut = mx._k_columns(given, resp, k)  # the model's start at K, as fit_k seeds k-means
        means, counts = mx._label_means(given, cut.argmax(axis=1), cut.shape[1])
        centres = np.where(counts[:, None] > 0, means, (cut.T @ given) / cut.sum(axis=0)[:, None])
        starts = [np.eye(len(centres))[mx._lloyd(z, centres, mx.KMEANS_ITER)]]
        starts += [mx.kmeans_start(z, k, rs) for _ in STARTS[1:]]
        for kind in TYPES:
            for name, start in zip(STARTS, starts, strict=True):
                mix, r, ll = fit(z, start, kind, var)
                out.append({"k": len(mix), "type": kind, "start": name, "ll": ll, "bic": mx.bic(ll, n_parameters(
                    len(mix), d, kind), n), "ent": entropy(r), "resp": r[pts.back]})
    return out


def today_variant(x: np.ndarray, probs: np.ndarray, rows: np.ndarray | None, starts: int, floor: bool
                  ) -> np.ndarray:
    """Today's :func:`~swarmctl.tasks.mixtures.refine` with each fresh fit of its search (a one-hot k-means start
    at the search's tolerance) the best of ``starts`` by likelihood and, with ``floor``, the rounding floor as its
    covariance floor: its labels."""
    plain_fit, plain_reg = mx._fit, mx.REG

    def best_fit(z, resp, tol, max_iter=mx.MAX_ITER, least=None):
        best = plain_fit(z, resp, tol, max_iter, least)
        if tol == mx.SEARCH_TOL and np.all((resp == 0) | (resp == 1)):
            rs = np.random.RandomState(1000 + resp.shape[1])
            for _ in range(starts - 1):
                start = mx._drop_empty(mx.kmeans_start(z, resp.shape[1], rs), mx.min_points(z.shape[1]))[0]
                other = plain_fit(z, start, tol, max_iter, least)
                best = other if other[2][-1] > best[2][-1] else best
        return best

    pts = mx._SortedPoints.of(x, probs, rows)
    try:
        mx._fit = best_fit
        mx.REG = max(plain_reg, rounding_floor(x) * (pts.unit.scale[0] * pts.robust) ** 2) if floor else plain_reg
        return mx.refine(x, probs, rows=rows).resp.argmax(axis=1)
    finally:
        mx._fit, mx.REG = plain_fit, plain_reg


def merge_to(resp: np.ndarray, k: int) -> np.ndarray:
    """Components merged two at a time, the pair whose union lowers the entropy most, down to ``k``."""
    while resp.shape[1] > k:
        pairs = [(i, j) for i in range(resp.shape[1]) for j in range(i + 1, resp.shape[1])]
        i, j = max(pairs, key=lambda p: entropy(resp[:, list(p)]) - entropy(resp[:, list(p)].sum(axis=1)))
        resp = np.column_stack([np.delete(resp, [i, j], axis=1), resp[:, i] + resp[:, j]])
    return resp


def rules(fits: list[dict], y: np.ndarray) -> dict[str, np.ndarray]:
    def best(types, starts=STARTS) -> list[dict]:  # per (K, type) the start of the highest likelihood
        top: dict = {}
        for f in fits:
            key = (f["k"], f["type"])
            if f["type"] in types and f["start"] in starts and f["ll"] > top.get(key, {"ll": -np.inf})["ll"]:
                top[key] = f
        return list(top.values())

    def icl(f: dict) -> float:
        return f["bic"] + 2 * f["ent"]

    out = {}
    for name, types, starts in (("full/km0", FULL, ("km0",)), ("full/model", FULL, ("model",)),
                                ("full/best4", FULL, STARTS), ("4 types/km0", ALL, ("km0",)),
                                ("4 types/best4", ALL, STARTS)):
        out[name] = min(best(types, starts), key=lambda f: f["bic"])["resp"].argmax(axis=1)
    for label, types in (("full", FULL), ("4 types", ALL)):
        cands = best(types)
        by_bic, by_icl = min(cands, key=lambda f: f["bic"]), min(cands, key=icl)
        out[f"{label}/ICL"] = by_icl["resp"].argmax(axis=1)
        out[f"merge {label}"] = merge_to(by_bic["resp"], min(by_icl["k"], by_bic["k"])).argmax(axis=1)
        out[f"oracle {label}"] = max((f["resp"].argmax(axis=1) for f in cands), key=lambda p: adjusted_rand_score(y, p))
    return out


def groups(sets: int, data: Path) -> dict[str, list]:
    val = list(validation_sets(data, 10 * sets))
    shapes = shape_sets(2 * sets)
    out = {"real": [(x, y) for x, y in real_sets().values()]}
    for half, lo in (("tune", 0), ("held", sets)):
        out[f"{half}: validation"] = val[5 * lo:5 * lo + 5 * sets]
        for name, seed, prior in (("broad", 2024, None), ("wide", 2025, WIDE_PRIOR)):
            out[f"{half}: {name}"] = list(broad_sets(5 * sets, seed=seed + 2024 * (lo > 0), prior=prior))
        for kind in ("isotropic", "sheared", "elongated"):
            out[f"{half}: blobs {kind}"] = list(blob_sets(kind, 2 * sets))[lo:lo + sets]
        for name, s in shapes.items():
            out[f"{half}: {name}"] = s[lo:lo + sets]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=4, help="sets per synthetic family and half (x5 of the priors)")
    ap.add_argument("--floor", action="store_true", help="the variance of rounding added to every covariance")
    ap.add_argument("--data", type=Path, default=Path(TASK.default_data), help="the seed-0 data set (its validation "
                    "split)")
    ap.add_argument("--variants", action="store_true", help="also today's refinement with the floor, four starts, both")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load_model(default_model(), CPU)[0]
    table: dict[str, dict[str, list]] = {}
    for group, sets in groups(args.sets, args.data).items():
        scores: dict[str, list] = {}
        for x, y in sets:
            x, y = np.asarray(x, dtype=np.float64), np.asarray(y)
            rows = mx.sample_rows(x, MODEL_POINTS) if len(x) > MODEL_POINTS else None
            seen = x if rows is None else x[rows]
            probs = TASK.cluster_points(model, seen, CPU, keep_probabilities=True).probabilities
            start = time.process_time()
            found, _, today = cluster_values(TASK, model, x, CPU)
            scores.setdefault("seconds", []).append(time.process_time() - start)
            start = time.process_time()
            fits = pool(x, probs, rows, set(today.searched) | {len(today.mixture)}, args.floor)
            scores.setdefault("pool seconds", []).append(time.process_time() - start)
            k = len(np.unique(y))
            preds = {"today": found.cluster, **rules(fits, y)}
            if args.variants:
                for name, starts, floor in (("today+floor", 1, True), ("today+best4", 4, False),
                                            ("today+best4+floor", 4, True)):
                    preds[name] = today_variant(x, probs, rows, starts, floor)
            for name, pred in preds.items():
                found_k = len(np.unique(pred))
                scores.setdefault(name, []).append((adjusted_rand_score(y, pred), found_k == k, found_k > 2 * k))
        table[group] = scores
        cells = [f"{name} {np.mean([s[0] for s in v]):.3f} {sum(s[1] for s in v)}/{len(v)} o{sum(s[2] for s in v)}"
                 for name, v in scores.items() if "seconds" not in name]
        ms = {k: f"{np.mean(scores[k]) * 1000:.0f} ms" for k in ("seconds", "pool seconds")}
        print(f"{group} (today {ms['seconds']}, the pool {ms['pool seconds']} per set):", " | ".join(cells), flush=True)
    if args.json:
        args.json.write_text(json.dumps({g: {m: np.asarray(v, dtype=float).tolist() for m, v in s.items()}
                                         for g, s in table.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()

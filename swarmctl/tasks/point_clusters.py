"""Clustering one set of a user's points, whatever the task that does it: the affine map to the training
scale, and the clusters, probabilities and entropies from a model's per-point logits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from swarmctl.errors import DataError

CHUNK_SIZE = 16_384  # entities per chunk when a model runs a large set in chunks (gates: 48 KiB per entity)


@dataclass(frozen=True)
class AffineMap:
    """x' = (x - shift) * scale, per coordinate: the user's units to the scale the model was trained on."""

    shift: np.ndarray  # (D,)
    scale: np.ndarray  # (D,)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return (x - self.shift) * self.scale


def standardization(values: np.ndarray, target_std: float, per_coordinate: bool = False) -> AffineMap:
    """The map that centres ``values`` (N, D) and scales them to the spread ``target_std``.

    By default one factor for all coordinates, so that the root mean square of the coordinates' standard
    deviations becomes ``target_std``: a similarity map, which keeps the clusters' shapes; shifting the
    points or scaling all coordinates by one positive factor leaves the mapped points unchanged (to float
    rounding). ``per_coordinate``: every coordinate gets the standard deviation ``target_std`` on its own
    (for coordinates in different units; it also undoes a positive scale per coordinate, but stretches
    sets that are long in one direction). A constant coordinate (or set) is only centred."""
    # Each coordinate is first rescaled by an exact power of two, so that the sums below neither overflow
    # (coordinates near 1e300) nor underflow (near 1e-300); the map is scaled back by the same powers.
    largest = np.max(np.abs(values), axis=0) if len(values) else np.zeros(values.shape[1])
    power = np.where(largest > 0, np.frexp(largest)[1], 0)
    unit = np.ldexp(values, -power)
    std, std_power = unit.std(axis=0), power
    if not per_coordinate:  # the root mean square of the spreads, in the largest coordinate's power
        top = power.max() if power.size else 0
        std = np.full_like(std, np.sqrt(np.mean(np.ldexp(std, power - top) ** 2)))
        std_power = np.full_like(power, top)
    with np.errstate(over="ignore"):
        scale = np.where(std > 0, np.ldexp(target_std / np.where(std > 0, std, 1.0), -std_power), 1.0)
    if not np.all(np.isfinite(scale)):
        raise DataError("the points are spread too little to be scaled in float64 (a spread below about 1e-308); "
                        "rescale them, or pass `no_standardize`")
    return AffineMap(np.ldexp(unit.mean(axis=0), power), scale)


def check_as_given(values: np.ndarray) -> None:
    """Points used as given (no standardization) reach the model in float32: a value beyond its range
    would be infinite, and the clusters meaningless (or every probability NaN)."""
    largest = float(np.abs(values).max()) if values.size else 0.0
    limit = float(np.finfo(np.float32).max)
    if largest > limit:
        raise DataError(f"the points hold values up to {largest:.3g}, beyond float32 (the model computes in it, up "
                        f"to {limit:.3g}); drop `no_standardize` (the map brings them to the training scale) or "
                        "rescale them")


@dataclass(frozen=True)
class PointClusters:
    """One set's clustering. Per point (N,): ``cluster`` (numbered 0.. from the largest cluster down),
    ``probability`` of that cluster and the ``entropy`` (nats) of the class distribution. Per cluster (K,):
    ``sizes`` and ``mean_confidence`` (the mean probability of its points). ``transform``: the map applied
    before the model (None: the points were used as given); ``chunked``: the entity axis ran in chunks;
    ``probabilities`` (N, K) float64, the class distribution of every point over the clusters found (the
    columns in cluster order), when asked for; ``slots``: the number of classes the model can give;
    ``counts``: a model with a count head's probabilities (C,) of 1, 2, ..., C or more clusters in the set."""

    cluster: np.ndarray
    probability: np.ndarray
    entropy: np.ndarray
    sizes: np.ndarray
    mean_confidence: np.ndarray
    transform: AffineMap | None
    chunked: bool
    probabilities: np.ndarray | None = None
    slots: int = 0
    counts: np.ndarray | None = None


def summarize_logits(logits: torch.Tensor, transform: AffineMap | None = None, chunked: bool = False,
                     keep_probabilities: bool = False) -> PointClusters:
    """Per-point class logits (N, C) -> the clusters (argmax), renumbered by size (ties: lower class first),
    with each point's probability of its cluster and the entropy of its class distribution; with
    ``keep_probabilities`` also every point's probabilities of the clusters found (renormalized over them)."""
    bad = ~torch.isfinite(logits).all(dim=-1)
    if bool(bad.any()):
        raise DataError(f"the model's output is not a number for {int(bad.sum()):,} of {len(logits):,} points: their "
                        "values are too large for it; map them to the training scale (leave out `no_standardize`) "
                        "or rescale them")
    logp = torch.log_softmax(logits.float(), dim=-1)
    best, label = logp.max(dim=-1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    probabilities = logp.exp().cpu().numpy().astype(np.float64) if keep_probabilities else None
    return _by_size(label.cpu().numpy(), logits.shape[-1], best.exp().cpu().numpy(), entropy.cpu().numpy(),
                    probabilities, transform, chunked, logits.shape[-1])


def summarize_probabilities(resp: np.ndarray, like: PointClusters) -> PointClusters:
    """Per-point probabilities (N, K) of K clusters (a refinement's) -> the clusters, renumbered by size
    like :func:`summarize_logits`; ``like`` gives the transform, chunking and slots."""
    resp = np.asarray(resp, dtype=np.float64)
    label = resp.argmax(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(resp > 0, resp * np.log(resp), 0.0).sum(axis=1)
    return _by_size(label, resp.shape[1], resp[np.arange(len(resp)), label], entropy, resp, like.transform,
                    like.chunked, like.slots)


def _by_size(label: np.ndarray, classes: int, probability: np.ndarray, entropy: np.ndarray,
             probabilities: np.ndarray | None, transform: AffineMap | None, chunked: bool, slots: int
             ) -> PointClusters:
    """The clusters of the points' classes ``label`` (N,) of ``classes``, numbered 0.. from the largest down
    (ties: lower class first); ``probabilities`` (N, classes), when given, kept for the clusters found and
    renormalized over them."""
    counts = np.bincount(label, minlength=classes)
    order = np.argsort(-counts, kind="stable")  # class of the k-th largest cluster
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    cluster = rank[label].astype(np.int64)
    K = int(np.count_nonzero(counts))
    sizes = counts[order[:K]].astype(np.int64)
    kept = None if probabilities is None else probabilities[:, order[:K]]
    return PointClusters(cluster, probability, entropy, sizes,
                         np.bincount(cluster, weights=probability, minlength=K)[:K] / sizes, transform, chunked,
                         None if kept is None else kept / kept.sum(axis=1, keepdims=True), slots)

"""Direct amortized clustering (protocol sec. 2): batches from an HDF5 dataset, the Hungarian-matched
loss, evaluation with matched accuracy and the true mixture's oracle, and the clustering of a user's
own points (any N: a SWARM with mean pooling runs the entity axis in chunks)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from swarmctl.config import DataConfig, TrainConfig, check_memory, check_seed, clustering_data_path, host_memory
from swarmctl.data.dataset import ClusteringBatch, bucketed_batches
from swarmctl.data.hdf5 import ensure_writable, generate_dataset, read_dataset
from swarmctl.data.tasks import ClusteringParams
from swarmctl.errors import DataError
from swarmctl.files import check_output_file, remove_orphan_temps
from swarmctl.tasks.base import DataProgress, Prepared, Task
from swarmctl.tasks.hungarian import hungarian_ce, matched_accuracy, oracle_logits

EVAL_BATCH = 100
CHUNK_SIZE = 16_384  # entities per chunk when a model runs a large set in chunks (gates: 48 KiB per entity)


def clustering_loss(model: nn.Module, batch: ClusteringBatch) -> torch.Tensor:
    """Per-task Hungarian-matched cross-entropy, (B,)."""
    return hungarian_ce(model(batch.x, batch.mask), batch.labels, batch.mask).per_task


def load_clustering_data(path: Path, *splits: str) -> tuple[dict, dict[str, Any]]:
    """All splits of a clustering dataset, checking that it is one and has ``splits``."""
    data, info = read_dataset(Path(path))
    if info["kind"] != "clustering":
        raise DataError(f"{path} holds {info['kind']!r} tasks, not clustering tasks")
    for split in splits:
        if split not in data:
            raise DataError(f"{path} has no split {split!r}; it has: {', '.join(data)}")
    return data, info


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
    std = values.std(axis=0)
    if not per_coordinate:
        std = np.full_like(std, np.sqrt(np.mean(std**2)))
    scale = np.where(std > 0, target_std / np.where(std > 0, std, 1.0), 1.0)
    return AffineMap(values.mean(axis=0), scale)


@dataclass(frozen=True)
class PointClusters:
    """One set's clustering. Per point (N,): ``cluster`` (numbered 0.. from the largest cluster down),
    ``probability`` of that cluster and the ``entropy`` (nats) of the class distribution. Per cluster (K,):
    ``sizes`` and ``mean_confidence`` (the mean probability of its points). ``transform``: the map applied
    before the model (None: the points were used as given); ``chunked``: the entity axis ran in chunks."""

    cluster: np.ndarray
    probability: np.ndarray
    entropy: np.ndarray
    sizes: np.ndarray
    mean_confidence: np.ndarray
    transform: AffineMap | None
    chunked: bool


def summarize_logits(logits: torch.Tensor, transform: AffineMap | None = None, chunked: bool = False) -> PointClusters:
    """Per-point class logits (N, C) -> the clusters (argmax), renumbered by size (ties: lower class first),
    with each point's probability of its cluster and the entropy of its class distribution."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    best, label = logp.max(dim=-1)
    entropy = -(logp.exp() * logp).sum(dim=-1)
    label = label.cpu().numpy()
    counts = np.bincount(label, minlength=logits.shape[-1])
    order = np.argsort(-counts, kind="stable")  # class of the k-th largest cluster
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    cluster = rank[label]
    K = int(np.count_nonzero(counts))
    probability = best.exp().cpu().numpy()
    sizes = counts[order[:K]]
    confidence = np.bincount(cluster, weights=probability, minlength=K)[:K] / sizes
    return PointClusters(cluster.astype(np.int64), probability, entropy.cpu().numpy(), sizes.astype(np.int64),
                         confidence, transform, chunked)


class ClusteringTask(Task):
    name = "clustering"
    summary = "direct amortized clustering: a class per point, Hungarian-matched loss"
    defaults = TrainConfig()
    default_split = "val"
    default_data = clustering_data_path(0)  # the paper's dataset, generated when missing
    data_kind = "clustering"
    clusters_points = True

    def data_config(self, data: Path | None, dataset: str | None, data_dir: Path | None) -> DataConfig:
        super().data_config(None, dataset, data_dir)  # checks the image-only options
        return DataConfig(path=str(data or self.default_data))

    def ensure_data(self, data_cfg: DataConfig, progress: DataProgress | None = None) -> None:
        """Generate the paper's dataset (seed 0) when the default file is asked for and missing."""
        path = Path(data_cfg.path) if data_cfg.path is not None else None
        if path is None or path != Path(self.default_data) or path.exists():
            return
        params = ClusteringParams()
        message = f"{path} is missing: generating the paper's dataset (seed 0, {params.n_tasks:,} tasks) first"
        with progress.generating(message, params.n_tasks) if progress else nullcontext() as update:
            generate_dataset(path, params, seed=0, progress=update)

    def generate_data(self, path: Path | None, seed: int, n_tasks: int, force: bool = False,
                      progress: DataProgress | None = None, **params: Any) -> tuple[Path, dict[str, Any], str]:
        """Seeded clustering tasks: the first form ``train``, the last ``val_fraction`` ``val``."""
        gen = ClusteringParams(n_tasks=n_tasks, **params)
        check_seed(seed)
        check_memory(gen.memory_bytes(), host_memory(), f"{gen.n_tasks:,} tasks of {gen.n_min}..{gen.n_max} points",
                     "lower --tasks or --n-max")
        path = Path(path or clustering_data_path(seed))
        check_output_file(path)
        ensure_writable(path, force)
        remove_orphan_temps(path.parent, f".{path.name}.")  # left by a gen-data that was killed
        with progress.generating("", gen.n_tasks) if progress else nullcontext() as update:
            info = generate_dataset(path, gen, seed, force=force, progress=update)
        return path, info, f"{gen.n_tasks - gen.n_val} train + {gen.n_val} validation tasks"

    def prepare(self, train_cfg: TrainConfig, data_cfg: DataConfig) -> Prepared:
        if data_cfg.path is None:
            raise DataError("clustering needs a dataset; pass --data FILE (create one with `swarmctl gen-data`)")
        splits, info = load_clustering_data(Path(data_cfg.path), data_cfg.train_split, data_cfg.val_split)
        # lambdas keep the loss looked up at call time (tests patch it)
        return Prepared(train=bucketed_batches(splits[data_cfg.train_split], train_cfg.batch_size),
                        val=bucketed_batches(splits[data_cfg.val_split], EVAL_BATCH),
                        loss_fn=lambda model, batch: clustering_loss(model, batch), checksum=info["checksum"])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, ckpt: dict[str, Any], data: Path | None, split: str,
                 device: torch.device) -> dict[str, Any]:
        """Hungarian-matched loss, matched accuracy and the oracle loss of the true mixture on ``split``."""
        data_path = Path(data) if data is not None else Path(ckpt["config"]["data"]["path"])
        splits, info = load_clustering_data(data_path, split)
        trained_on = ckpt["config"]["data"].get("checksum")
        if data is None and trained_on is not None and info["checksum"] != trained_on:
            raise DataError(f"{data_path} changed since this model was trained on it (its checksum differs from the "
                            f"run's); pass --data {data_path} to score it on the new file anyway")
        tasks = splits[split]
        batches = bucketed_batches(tasks, EVAL_BATCH)
        model.eval()
        loss_sum = acc_sum = oracle_sum = oracle_acc_sum = 0.0
        means, covs = torch.from_numpy(tasks.means), torch.from_numpy(tasks.covs)
        n_clusters = torch.from_numpy(tasks.n_clusters)
        for batch in batches:
            b = batch.to(device)
            logits = model(b.x, b.mask)
            matched = hungarian_ce(logits, b.labels, b.mask)  # one forward pass gives loss and accuracy
            loss_sum += matched.per_task.double().sum().item()
            acc_sum += matched_accuracy(logits, b.labels, b.mask, matched.assignment).sum().item()
            idx = batch.index
            oracle = oracle_logits(batch.x, means[idx], covs[idx], n_clusters[idx])
            om = hungarian_ce(oracle, batch.labels, batch.mask)
            oracle_sum += om.per_task.double().sum().item()
            oracle_acc_sum += matched_accuracy(oracle, batch.labels, batch.mask, om.assignment).sum().item()
        n = len(tasks)
        return {"data": str(data_path), "split": split, "tasks": n, "loss": loss_sum / n, "accuracy": acc_sum / n,
                "oracle_loss": oracle_sum / n, "oracle_accuracy": oracle_acc_sum / n}

    def point_std(self) -> float:
        """The standard deviation per coordinate of the points the models were trained on (the paper's
        generator): where :meth:`cluster_points` maps a user's points to."""
        return ClusteringParams().point_std()

    @torch.no_grad()
    def cluster_points(self, model: nn.Module, values: np.ndarray, device: torch.device, standardize: bool = True,
                       chunk_size: int | None = None, progress: Callable[[float], None] | None = None,
                       per_coordinate: bool = False) -> PointClusters:
        """Cluster one set of points ``values`` (N, D) in one forward pass of ``model``.

        With ``standardize`` the points are first mapped affinely to the training scale
        (:func:`standardization`: one factor for all coordinates or, ``per_coordinate``, one each). A
        model with ``forward_chunked`` and mean pooling (SWARM) runs the entity axis ``chunk_size``
        entities at a time, so memory grows only by its states (2 x hidden floats per point); any other
        model runs all N at once. ``progress(fraction_done)``.
        """
        transform = standardization(values, self.point_std(), per_coordinate) if standardize else None
        x = torch.from_numpy(transform.apply(values) if transform else values).to(device, torch.float32)
        model.eval()
        chunked = getattr(model, "symmetry", None) == "equivariant" and hasattr(model, "forward_chunked")
        if chunked:
            logits = model.forward_chunked(x, chunk_size or CHUNK_SIZE, progress)
        else:
            logits = model(x[None], torch.ones(1, len(x), dtype=torch.bool, device=device))[0]
            if progress is not None:
                progress(1.0)
        return summarize_logits(logits, transform, chunked)

    def eval_table(self, res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
        return (["", "loss (nats/entity)", "matched accuracy"],
                [["model", f"{res['loss']:.4f}", f"{res['accuracy']:.2%}"],
                 ["oracle (true mixture)", f"{res['oracle_loss']:.4f}", f"{res['oracle_accuracy']:.2%}"]])

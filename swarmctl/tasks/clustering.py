"""Direct amortized clustering (the paper, sec. 4.1): batches from an HDF5 dataset, the Hungarian-matched
loss, evaluation with matched accuracy and the true mixture's oracle, and the clustering of a user's
own points (any N: a SWARM with mean pooling runs the entity axis in chunks)."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from swarmctl.config import DATA_DIR, DataConfig, ModelConfig, TrainConfig, check_memory, host_memory
from swarmctl.data.clustering_generator import (
    MAX_CLUSTERS,
    WIDE_PRIOR,
    BroadParams,
    ClusteringParams,
    TrainingRange,
    training_range,
)
from swarmctl.data.dataset import ClusteringBatch, bucketed_batches
from swarmctl.data.hdf5 import generate_dataset, read_splits
from swarmctl.errors import DataError, OutputExists, SwarmctlWarning
from swarmctl.files import staged_outputs
from swarmctl.tasks.base import DataProgress, Task, check_generator_params, prepare_output
from swarmctl.tasks.hungarian import hungarian_ce, matched_accuracy, oracle_logits
from swarmctl.tasks.point_clusters import CHUNK_SIZE, PointClusters, check_as_given, standardization, summarize_logits
from swarmctl.training.checkpoint import Checkpoint
from swarmctl.training.loop import TrainingData
from swarmctl.training.modes import StepMode

EVAL_BATCH = 100


COUNT_MODEL = "swarm-count"  # the registered model with a count head, trained on the wide prior
COUNT_WEIGHT = 0.5  # the count head's cross-entropy (nats per set) next to the matched loss (nats per point)


def clustering_loss(model: nn.Module, batch: ClusteringBatch) -> torch.Tensor:
    """Per-task Hungarian-matched cross-entropy, (B,); for a model with a count head (``forward_with_count``),
    plus :data:`COUNT_WEIGHT` times the cross-entropy of its distribution over K against the true K."""
    if not hasattr(model, "forward_with_count"):
        return hungarian_ce(model(batch.x, batch.mask), batch.labels, batch.mask).per_task
    logits, count = model.forward_with_count(batch.x, batch.mask)
    truth = (cluster_counts(batch.labels, batch.mask, logits.shape[-1]) - 1).clamp(0, count.shape[-1] - 1)
    return (hungarian_ce(logits, batch.labels, batch.mask).per_task
            + COUNT_WEIGHT * F.cross_entropy(count.float(), truth, reduction="none"))


def cluster_counts(labels: torch.Tensor, mask: torch.Tensor, classes: int) -> torch.Tensor:
    """The number of distinct labels (B,) among each set's real entities: labels (B, N) in 0..classes-1, mask
    (B, N) True = real. No host sync (a captured training step may call it)."""
    hits = torch.zeros(labels.shape[0], classes, device=labels.device).scatter_add_(1, labels, mask.float())
    return (hits > 0).sum(dim=1)


def count_accuracy(count: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Whether the most probable K of count logits (B, C) is the true number of clusters (B,) bool."""
    return count.argmax(dim=-1) + 1 == cluster_counts(labels, mask, count.shape[-1]).clamp_min(1)


_GENERATOR = {f.name: f.default for f in dataclasses.fields(ClusteringParams) if f.name != "n_tasks"}

GRAPH_N_BUCKET = 100  # with CUDA graphs, training sets are padded to a multiple of this many points


class ClusteringTask(Task):
    name = "clustering"
    summary = "direct amortized clustering: a class per point, Hungarian-matched loss"
    default_data = f"{DATA_DIR}/clustering-seed0.h5"  # the paper's dataset, generated when missing
    proven_modes = ("eager", "amp", "graphs", "compile")  # `--step auto` may pick (training/modes.py)
    train_data_help = f"{default_data}, generated when missing"
    metric_help = "Hungarian-matched loss and matched accuracy, next to the true mixture's oracle"
    studies = Task.studies | {"shuffle-variance", "plot-entropy", "cluster"}
    data_kind = "clustering"
    data_kind_help = ("train/val splits; per task K clusters uniform in k-min..k-max, N points uniform in "
                      "n-min..n-max, equal-weight multinomial counts, inverse-Wishart covariances, N(0, I) means, "
                      "points shuffled; the last val-fraction of the tasks form the validation split")
    generator = _GENERATOR
    default_tasks = ClusteringParams.n_tasks

    def data_file(self, seed: int | str) -> str:
        return f"{DATA_DIR}/clustering-seed{seed}.h5"

    def ensure_data(self, data_cfg: DataConfig, progress: DataProgress | None = None) -> None:
        """Generate the paper's dataset (seed 0) when the default file is asked for and missing."""
        path = Path(data_cfg.path) if data_cfg.path is not None else None
        if path is None or path != Path(self.default_data) or path.exists():
            return
        params = ClusteringParams()
        message = f"{path} is missing: generating the paper's dataset (seed 0, {params.n_tasks:,} tasks) first"
        with progress.generating(message, params.n_tasks) if progress else nullcontext() as update:
            # OutputExists: another command (a parallel sweep shard) made it meanwhile: read theirs
            with suppress(OutputExists), staged_outputs():  # published at once: read next by this command
                generate_dataset(path, params, seed=0, progress=update)

    def generate_data(self, path: Path | None, seed: int, n_tasks: int | None = None, force: bool = False,
                      progress: DataProgress | None = None, **params: Any) -> tuple[Path, dict[str, Any], str]:
        """Seeded clustering tasks: the first form ``train``, the last ``val_fraction`` ``val``."""
        check_generator_params(self, params)
        gen = ClusteringParams(n_tasks=self.default_tasks if n_tasks is None else n_tasks, **params)
        check_memory(gen.memory_bytes(), host_memory(), f"{gen.n_tasks:,} tasks of {gen.n_min}..{gen.n_max} points",
                     "lower `tasks` or `n_max`")
        path = prepare_output(self, path, seed, force)
        with progress.generating("", gen.n_tasks) if progress else nullcontext() as update:
            info = generate_dataset(path, gen, seed, force=force, progress=update)
        return path, info, f"{gen.n_tasks - gen.n_val} train + {gen.n_val} validation tasks"

    def prepare(self, train_cfg: TrainConfig, data_cfg: DataConfig) -> TrainingData:
        if data_cfg.path is None:
            raise DataError("clustering needs a dataset; name it with `data` (create one with `swarmctl gen-data`)")
        splits, info = read_splits(Path(data_cfg.path), "train", "val", kind="clustering")
        pad_to = GRAPH_N_BUCKET if StepMode.of(train_cfg).graphs else 1  # a few step shapes for the graphs to capture
        return TrainingData(train=bucketed_batches(splits["train"], train_cfg.batch_size, pad_to),
                            val=bucketed_batches(splits["val"], EVAL_BATCH), loss_fn=clustering_loss,
                            checksum=info["checksum"])

    def _paper_recipe(self, path: Path, info: dict[str, Any]) -> bool:
        """Whether ``path`` is the default dataset as swarmctl generates it (seed 0, the paper's generator):
        the same tasks as on any machine, though not always the same bytes (scipy and the BLAS round the
        covariances' last bits differently), so a checksum that differs there is no changed file."""
        generator = dict(info["generator"])
        return (path == Path(self.default_data) and info["seed"] == 0 and generator.pop("n_tasks", None)
                == self.default_tasks and {k: v for k, v in generator.items() if k != "name"} == _GENERATOR)

    @torch.no_grad()
    def score(self, model: nn.Module, ckpt: Checkpoint, data: Path | None, split: str,
              device: torch.device, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Hungarian-matched loss, matched accuracy and the oracle loss of the true mixture on ``split``."""
        data_path = Path(data) if data is not None else Path(ckpt.data_config.path or self.default_data)
        splits, info = read_splits(data_path, split, kind="clustering")
        trained_on = ckpt.data_config.checksum
        if data is None and trained_on is not None and info["checksum"] != trained_on:
            if not self._paper_recipe(data_path, info):
                raise DataError(f"{data_path} changed since this model was trained on it (its checksum differs from "
                                f"the run's); pass `data` {data_path} to score it on the new file anyway")
            warnings.warn(f"{data_path} holds the paper's seed-0 tasks, generated here; its bytes differ from the "
                          "file this model was trained on (numerical libraries round the last digits differently "
                          "from machine to machine), so the numbers may differ in their last digits", SwarmctlWarning,
                          stacklevel=2)
        tasks = splits[split]
        batches = bucketed_batches(tasks, EVAL_BATCH)
        model.eval()
        loss_sum = acc_sum = oracle_sum = oracle_acc_sum = count_sum = 0.0
        counting = hasattr(model, "forward_with_count")  # a count head: how often its most probable K is right
        means, covs = torch.from_numpy(tasks.means), torch.from_numpy(tasks.covs)
        n_clusters = torch.from_numpy(tasks.n_clusters)
        for k, batch in enumerate(batches, start=1):
            b = batch.to(device)
            if counting:
                logits, count = model.forward_with_count(b.x, b.mask)
                count_sum += count_accuracy(count, b.labels, b.mask).sum().item()
            else:
                logits = model(b.x, b.mask)
            matched = hungarian_ce(logits, b.labels, b.mask)  # one forward pass gives loss and accuracy
            loss_sum += matched.per_task.double().sum().item()
            acc_sum += matched_accuracy(logits, b.labels, b.mask, matched.assignment).sum().item()
            idx = batch.index
            oracle = oracle_logits(batch.x, means[idx], covs[idx], n_clusters[idx])
            om = hungarian_ce(oracle, batch.labels, batch.mask)
            oracle_sum += om.per_task.double().sum().item()
            oracle_acc_sum += matched_accuracy(oracle, batch.labels, batch.mask, om.assignment).sum().item()
            if progress is not None:
                progress(k, len(batches))
        n = len(tasks)
        return {"data": str(data_path), "split": split, "tasks": n, "loss": loss_sum / n, "accuracy": acc_sum / n,
                "oracle_loss": oracle_sum / n, "oracle_accuracy": oracle_acc_sum / n,
                **({"count_accuracy": count_sum / n} if counting else {})}

    def point_std(self) -> float:
        """The standard deviation per coordinate of the points the models were trained on (the paper's
        generator): where :meth:`cluster_points` maps a user's points to."""
        return ClusteringParams().point_std()

    def training_range(self, model_cfg: ModelConfig) -> TrainingRange:
        """What a model has seen in training (set sizes, numbers of clusters, cluster spreads): the paper's
        generator's range, joined for a model with more than 10 slots with the broad prior's (N up to 800; a
        count head: ``WIDE_PRIOR``), as benchmarks/train_broad.py trains them."""
        if model_cfg.dim_out <= MAX_CLUSTERS:
            return _range_of(ClusteringParams())
        prior = WIDE_PRIOR if model_cfg.name == COUNT_MODEL else BroadParams(n_max=800)
        a, b = _range_of(prior), _range_of(ClusteringParams())
        return TrainingRange(min(a.n_min, b.n_min), max(a.n_max, b.n_max), min(a.k_min, b.k_min),
                             max(a.k_max, b.k_max), min(a.spread_lo, b.spread_lo), max(a.spread_hi, b.spread_hi))

    @torch.no_grad()
    def cluster_points(self, model: nn.Module, values: np.ndarray, device: torch.device, standardize: bool = True,
                       chunk_size: int | None = None, progress: Callable[[float], None] | None = None,
                       per_coordinate: bool = False, keep_probabilities: bool = False) -> PointClusters:
        """Cluster one set of points ``values`` (N, D) in one forward pass of ``model``, first mapped to the
        training scale with ``standardize`` (:func:`standardization`). An equivariant model with
        ``forward_chunked`` (SWARM) runs ``chunk_size`` entities at a time; a count head run in one pass adds
        ``counts``; ``keep_probabilities`` keeps every point's probabilities of the clusters found."""
        if not standardize:
            check_as_given(values)
        transform = standardization(values, self.point_std(), per_coordinate) if standardize else None
        x = torch.from_numpy(transform.apply(values) if transform else values).to(device, torch.float32)
        model.eval()
        chunked = getattr(model, "symmetry", None) == "equivariant" and hasattr(model, "forward_chunked")
        ran_in_chunks = chunked and len(x) > (chunk_size or CHUNK_SIZE)  # one chunk is the plain pass
        counts = None
        everyone = torch.ones(1, len(x), dtype=torch.bool, device=device)
        if hasattr(model, "forward_with_count") and not ran_in_chunks:  # its distribution over K, in the same pass
            logits, count = model.forward_with_count(x[None], everyone)
            logits, counts = logits[0], count[0].double().softmax(-1).cpu().numpy()
            if progress is not None:
                progress(1.0)
        elif chunked:
            logits = model.forward_chunked(x, chunk_size or CHUNK_SIZE, progress)
        else:
            logits = model(x[None], everyone)[0]
            if progress is not None:
                progress(1.0)
        found = summarize_logits(logits, transform, ran_in_chunks, keep_probabilities)
        return found if counts is None else dataclasses.replace(found, counts=counts)

    def eval_table(self, res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
        rows = [["model", f"{res['loss']:.4f}", f"{res['accuracy']:.2%}"],
                ["oracle (true mixture)", f"{res['oracle_loss']:.4f}", f"{res['oracle_accuracy']:.2%}"]]
        if "count_accuracy" in res:
            rows.append(["number of clusters, model's most probable", "", f"{res['count_accuracy']:.2%}"])
        return ["", "loss (nats/entity)", "matched accuracy"], rows


@functools.cache
def _range_of(prior: ClusteringParams | BroadParams) -> TrainingRange:
    return training_range(prior)

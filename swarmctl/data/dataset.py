"""Padded batches of ragged clustering tasks, bucketed by set size (the paper, sec. 4.1.3, Setup), and random padded
sets (the inputs every set model takes)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from swarmctl.data.clustering_generator import ClusteringTasks


class TensorBatch:
    """Base of the batches: a frozen dataclass of tensors, the first field's first axis the batch's."""

    def to(self: B, device: torch.device) -> B:
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device, non_blocking=True)
                                            for f in dataclasses.fields(self)})  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(getattr(self, dataclasses.fields(self)[0].name))  # type: ignore[arg-type]


B = TypeVar("B", bound=TensorBatch)


@dataclass(frozen=True)
class ClusteringBatch(TensorBatch):
    """x (B, N, 2) float32 (zeros at padding), labels (B, N) int64 (0 at padding), mask (B, N) bool
    (True = real entity), index (B,) task indices in the split."""

    x: Tensor
    labels: Tensor
    mask: Tensor
    index: Tensor


def _collate(tasks: ClusteringTasks, index: np.ndarray, pad_to: int = 1) -> ClusteringBatch:
    """Pad the tasks at ``index`` to the largest of them, rounded up to a multiple of ``pad_to``."""
    sizes = tasks.sizes[index]
    B, N = len(index), -(-int(sizes.max()) // pad_to) * pad_to
    x = np.zeros((B, N, 2), dtype=np.float32)
    labels = np.zeros((B, N), dtype=np.int64)
    for b, t in enumerate(index):
        pts, lab = tasks.task(int(t))
        x[b, : len(pts)] = pts
        labels[b, : len(lab)] = lab
    mask = np.arange(N)[None, :] < sizes[:, None]
    return ClusteringBatch(torch.from_numpy(x), torch.from_numpy(labels), torch.from_numpy(mask),
                           torch.from_numpy(np.asarray(index, dtype=np.int64)))


def bucketed_batches(tasks: ClusteringTasks, batch_size: int, pad_to: int = 1) -> list[ClusteringBatch]:
    """Sort tasks by size (stable), cut into consecutive chunks of ``batch_size`` (the last may be
    smaller) and pad each chunk (to a multiple of ``pad_to`` points: with 100, the paper's sizes 100..1000
    give 10 batch shapes instead of one per batch, which is what CUDA graphs need). Composition is fixed;
    only the order of batches changes per epoch."""
    order = np.argsort(tasks.sizes, kind="stable")
    return [_collate(tasks, order[i : i + batch_size], pad_to) for i in range(0, len(order), batch_size)]


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    """The order of batches in ``epoch``: a permutation that depends only on (seed, epoch), so a resumed
    run sees the same order as an uninterrupted one."""
    return np.random.default_rng([seed, epoch]).permutation(n_batches).tolist()


def random_sets(
    n_sets: int,
    n_max: int,
    dim: int = 2,
    n_min: int | None = None,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Random padded sets: x (n_sets, n_max, dim) and a bool mask (True = present) whose first set is
    full and the others hold between ``n_min`` (default n_max // 2) and n_max real entities."""
    n_min = max(1, n_max // 2) if n_min is None else n_min
    x = torch.randn(n_sets, n_max, dim, dtype=dtype, generator=generator)
    sizes = torch.randint(n_min, n_max + 1, (n_sets,), generator=generator)
    sizes[0] = n_max
    mask = torch.arange(n_max).unsqueeze(0) < sizes.unsqueeze(1)
    return x * mask.unsqueeze(-1).to(dtype), mask

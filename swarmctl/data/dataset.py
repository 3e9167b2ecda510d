"""Padded batches of ragged clustering tasks, bucketed by set size (the paper, sec. 4.1.3, Setup), and random padded
sets (the inputs every set model takes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from swarmctl.data.clustering_generator import ClusteringTasks


@dataclass(frozen=True)
class ClusteringBatch:
    """x (B, N, 2) float32 (zeros at padding), labels (B, N) int64 (0 at padding), mask (B, N) bool
    (True = real entity), index (B,) task indices in the split."""

    x: Tensor
    labels: Tensor
    mask: Tensor
    index: Tensor

    def to(self, device: torch.device) -> ClusteringBatch:
        return ClusteringBatch(*(t.to(device, non_blocking=True) for t in (self.x, self.labels, self.mask, self.index)))

    def __len__(self) -> int:
        return self.x.shape[0]


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

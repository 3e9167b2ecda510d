"""How much a model's loss moves when the entities of its input set are reordered (protocol sec. 3.1).

For an equivariant model the spread is float rounding; for the unsorted BiLSTM it is what the paper's
violin plot shows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from swarmctl.data.tasks import ClusteringTasks
from swarmctl.errors import ConfigError
from swarmctl.studies.results import ShuffleVarianceResult
from swarmctl.tasks.hungarian import hungarian_ce


def spread_task_indices(sizes: np.ndarray, n_tasks: int) -> np.ndarray:
    """``n_tasks`` task indices spread evenly over the range of set sizes (sorted by N, evenly spaced)."""
    if n_tasks < 1:
        raise ConfigError(f"tasks must be >= 1, got {n_tasks}")
    order = np.argsort(sizes, kind="stable")
    n_tasks = min(n_tasks, len(order))
    picks = np.unique(np.round(np.linspace(0, len(order) - 1, n_tasks)).astype(int))
    return order[picks]


@torch.no_grad()
def measure_shuffle_variance(
    model: nn.Module,
    tasks: ClusteringTasks,
    label: str,
    n_tasks: int = 100,
    n_shuffles: int = 1000,
    seed: int = 0,
    batch_entities: int = 200_000,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> ShuffleVarianceResult:
    """Evaluate ``model`` on ``n_shuffles`` random orderings of each of ``n_tasks`` tasks (spread over N).

    The orderings of one task are batched (about ``batch_entities`` entities per forward pass); no
    padding is needed since all orderings of a task have the same size. Runs in float32, eval mode.
    """
    if n_shuffles < 2:
        raise ConfigError(f"shuffles must be >= 2, got {n_shuffles}")
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    index = spread_task_indices(tasks.sizes, n_tasks)
    means, stds = np.zeros(len(index)), np.zeros(len(index))
    for k, t in enumerate(index):
        pts, lab = tasks.task(int(t))
        x, y = torch.from_numpy(pts), torch.from_numpy(lab)
        n = len(pts)
        per_batch = max(1, batch_entities // n)
        losses = []
        for start in range(0, n_shuffles, per_batch):
            m = min(per_batch, n_shuffles - start)
            perms = torch.argsort(torch.rand(m, n, generator=gen), dim=1)  # (m, N)
            xb, yb = x[perms].to(device), y[perms].to(device)
            mask = torch.ones(m, n, dtype=torch.bool, device=device)
            losses.append(hungarian_ce(model(xb, mask), yb, mask).per_task.double().cpu())
        loss = torch.cat(losses).numpy()
        means[k], stds[k] = loss.mean(), loss.std()
        if progress is not None:
            progress(k + 1)
    return ShuffleVarianceResult(label=label, task_index=index.astype(np.int64), sizes=tasks.sizes[index],
                                 mean=means, std=stds, n_shuffles=n_shuffles)

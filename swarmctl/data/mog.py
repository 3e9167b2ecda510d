"""Parametrized amortized clustering tasks (the paper, sec. 4.2): mixtures of 4 isotropic Gaussians,
drawn fresh for every training step from a seeded generator, plus a fixed seeded test set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from swarmctl.data.clustering_generator import MAX_CLUSTERS, ClusteringTasks
from swarmctl.data.dataset import TensorBatch


@dataclass(frozen=True)
class MogParams:
    """The paper's settings: K = 4, sigma = 0.3, means U(-4, 4)^2, N uniform in 100..499 per batch,
    weights Dirichlet(1, 1, 1, 1). No option sets them (the MoG kind takes no generator options)."""

    n_clusters: int = 4
    sigma: float = 0.3
    mean_range: float = 4.0
    n_min: int = 100
    n_max: int = 499


@dataclass(frozen=True)
class MogBatch(TensorBatch):
    """x (B, N, 2) float32, mask (B, N) bool (True = present), means (B, K, 2), weights (B, K),
    sigma (B,) of the generating mixtures, labels (B, N) the generating component of each point."""

    x: Tensor
    mask: Tensor
    means: Tensor
    weights: Tensor
    sigma: Tensor
    labels: Tensor


def sample_mog_batch(rng: np.random.Generator, batch_size: int, params: MogParams = MogParams()) -> MogBatch:
    """One batch, draws in the authors' order: N (shared by the batch), all the noise, then per task
    the means, the weights and the labels."""
    K = params.n_clusters
    N = int(rng.integers(params.n_min, params.n_max + 1))
    noise = rng.normal(0.0, params.sigma, size=(batch_size, N, 2))
    means = np.empty((batch_size, K, 2))
    weights = np.empty((batch_size, K))
    labels = np.empty((batch_size, N), dtype=np.int64)
    for b in range(batch_size):
        means[b] = rng.uniform(-params.mean_range, params.mean_range, size=(K, 2))
        weights[b] = rng.dirichlet(np.ones(K))
        labels[b] = rng.choice(K, size=N, p=weights[b])
    x = np.take_along_axis(means, labels[..., None], axis=1) + noise  # (B, N, 2)
    return MogBatch(torch.from_numpy(x.astype(np.float32)), torch.ones(batch_size, N, dtype=torch.bool),
                    torch.from_numpy(means), torch.from_numpy(weights),
                    torch.full((batch_size,), params.sigma, dtype=torch.float64), torch.from_numpy(labels))


N_BUCKET = 50  # on a device, N is padded up to a multiple of this: 9 step shapes for N in 100..499


def padded_size(n: int, bucket: int = N_BUCKET) -> int:
    """The bucket a set of ``n`` points is padded to (``n`` rounded up to a multiple of ``bucket``)."""
    return -(-n // bucket) * bucket


def sample_mog_batch_torch(rng: np.random.Generator, batch_size: int, params: MogParams = MogParams(),
                           device: torch.device | str = "cpu", bucket: int = N_BUCKET) -> MogBatch:
    """One batch drawn on ``device`` by a torch generator, with the paper's distribution: ``rng`` (host)
    draws N and the generator's seed, so nothing is read back from the device; the points are padded to
    :func:`padded_size` (N) with the mask False there (x 0, label 0), so a run has a few step shapes."""
    K, B = params.n_clusters, batch_size
    N = int(rng.integers(params.n_min, params.n_max + 1))
    gen = torch.Generator(device=device).manual_seed(int(rng.integers(2**63)))
    P = padded_size(N, bucket)
    f64 = dict(dtype=torch.float64, device=device, generator=gen)
    means = (torch.rand(B, K, 2, **f64) * 2 - 1) * params.mean_range  # (B, K, 2)
    expo = torch.empty(B, K, dtype=torch.float64, device=device).exponential_(generator=gen)
    weights = expo / expo.sum(1, keepdim=True)  # (B, K) Dirichlet(1, ..., 1)
    u = torch.rand(B, P, **f64)
    labels = (u.unsqueeze(-1) >= weights.cumsum(1)[:, None, : K - 1]).sum(-1)  # (B, P) in 0..K-1
    noise = torch.randn(B, P, 2, dtype=torch.float32, device=device, generator=gen) * params.sigma
    mask = (torch.arange(P, device=device) < N).expand(B, P)
    centre = means.gather(1, labels.unsqueeze(-1).expand(-1, -1, 2)).float()  # (B, P, 2)
    x = (centre + noise) * mask.unsqueeze(-1)
    return MogBatch(x, mask, means, weights, torch.full((B,), params.sigma, dtype=torch.float64, device=device),
                    labels * mask)


class FreshBatches:
    """A sequence of ``n`` batches drawn on access from a generator seeded by (seed, stream, epoch, index):
    every epoch sees new tasks, and a resumed run the same ones. The NumPy sampler draws them on the host;
    :meth:`on` an accelerator, :func:`sample_mog_batch_torch` there (docs/design.md, "On a GPU")."""

    def __init__(self, n: int, batch_size: int, seed: int, stream: int, epoch: int, params: MogParams,
                 device: torch.device | None = None) -> None:
        self.n, self.batch_size, self.params, self.device = n, batch_size, params, device
        self.key = (seed, stream, epoch)

    def __len__(self) -> int:
        return self.n

    def on(self, device: torch.device) -> FreshBatches:
        """The same batches, drawn on ``device`` (the CPU: the NumPy sampler, unchanged)."""
        device = None if torch.device(device).type == "cpu" else torch.device(device)
        return FreshBatches(self.n, self.batch_size, *self.key, self.params, device=device)

    def __getitem__(self, i: int) -> MogBatch:
        if not 0 <= i < self.n:
            raise IndexError(i)
        rng = np.random.default_rng([*self.key, i])
        if self.device is None:
            return sample_mog_batch(rng, self.batch_size, self.params)
        return sample_mog_batch_torch(rng, self.batch_size, self.params, self.device)


def generate_mog_tasks(n_batches: int, batch_size: int, seed: int, params: MogParams = MogParams()) -> ClusteringTasks:
    """A fixed set of ``n_batches * batch_size`` tasks as ragged clustering tasks (means, isotropic
    covariances sigma^2 I, mixture weights and labels kept), e.g. the 10,000-task test set."""
    rng = np.random.default_rng([seed, 2])
    K = params.n_clusters
    batches = [sample_mog_batch(rng, batch_size, params) for _ in range(n_batches)]
    n = n_batches * batch_size
    means, covs, weights = (np.zeros((n, MAX_CLUSTERS, *shape)) for shape in ((2,), (2, 2), ()))  # zero beyond K
    means[:, :K] = np.concatenate([b.means.numpy() for b in batches])
    covs[:, :K] = params.sigma**2 * np.eye(2)
    weights[:, :K] = np.concatenate([b.weights.numpy() for b in batches])
    sizes = np.repeat([b.x.shape[1] for b in batches], batch_size)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return ClusteringTasks(np.concatenate([b.x.numpy().reshape(-1, 2) for b in batches]),
                           np.concatenate([b.labels.numpy().ravel() for b in batches]), offsets,
                           np.full(n, K, dtype=np.int64), means, covs, weights)

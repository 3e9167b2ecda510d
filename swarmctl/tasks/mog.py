"""Parametrized amortized clustering (the paper, sec. 4.2): predict a 4-component mixture's parameters
from its points; trained on tasks drawn fresh every step, scored by the per-point log-likelihood next
to the oracle log-likelihood of the true parameters."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from swarmctl.config import DATA_DIR, DataConfig, TrainConfig, check_memory, host_memory
from swarmctl.data.clustering_generator import ClusteringParams, ClusteringTasks
from swarmctl.data.dataset import bucketed_batches
from swarmctl.data.hdf5 import generate_mog_dataset, read_splits
from swarmctl.data.mog import FreshBatches, MogBatch, MogParams, generate_mog_tasks
from swarmctl.errors import ConfigError, command_line
from swarmctl.models.mog import mixture_parameters
from swarmctl.tasks.base import DataProgress, Task, check_generator_params, prepare_output
from swarmctl.training.checkpoint import Checkpoint
from swarmctl.training.loop import TrainingData

TEST_BATCHES, TEST_BATCH_SIZE, TEST_SEED = 1000, 10, 0  # the fixed 10,000-task test set


def mixture_log_likelihood(x: Tensor, mask: Tensor, means: Tensor, stds: Tensor, log_weights: Tensor) -> Tensor:
    """Per task, the mean over real points of log sum_k pi_k N(x; mu_k, diag(sigma_k^2)).

    x (B, N, 2), mask (B, N) bool, means (B, K, 2), stds (B, K, 2) standard deviations, log_weights (B, K)
    -> (B,) nats per point.
    """
    z = (x.unsqueeze(2) - means.unsqueeze(1)) / stds.unsqueeze(1)  # (B, N, K, 2)
    comp = (-0.5 * z.square() - torch.log(stds).unsqueeze(1) - 0.5 * math.log(2 * math.pi)).sum(-1)  # (B, N, K)
    ll = torch.logsumexp(comp + log_weights.unsqueeze(1), dim=-1)  # (B, N)
    m = mask.to(ll.dtype)
    return (ll * m).sum(1) / m.sum(1).clamp_min(1)


def oracle_log_likelihood(batch: MogBatch) -> Tensor:
    """The same per-point LL with the true means, isotropic sigma and weights (float64)."""
    stds = batch.sigma.view(-1, 1, 1).expand_as(batch.means)
    return mixture_log_likelihood(batch.x.double(), batch.mask, batch.means.double(), stds.double(),
                                  torch.log(batch.weights.double()))


def mog_loss(model: nn.Module, batch: MogBatch) -> Tensor:
    """Per-task negative log-likelihood per point, (B,)."""
    means, stds, log_w = mixture_parameters(model(batch.x, batch.mask).float())
    return -mixture_log_likelihood(batch.x.float(), batch.mask, means, stds, log_w)


def mog_batches(tasks: ClusteringTasks, batch_size: int, n_clusters: int = MogParams.n_clusters) -> list[MogBatch]:
    """Stored tasks as padded MogBatches (size-bucketed)."""
    out = []
    for b in bucketed_batches(tasks, batch_size):
        idx = b.index.numpy()
        sigma = np.sqrt(tasks.covs[idx, 0, 0, 0])
        out.append(MogBatch(b.x, b.mask, torch.from_numpy(tasks.means[idx, :n_clusters]),
                            torch.from_numpy(tasks.weights[idx, :n_clusters]), torch.from_numpy(sigma), b.labels))
    return out


class MogTask(Task):
    name = "mog"
    summary = "parametrized amortized clustering: a 4-component mixture per set, log-likelihood"
    defaults = TrainConfig(lr=0.01, batch_size=10, max_epochs=100, steps_per_epoch=500, val_batches=100,
                           lr_decay_epoch=70, lr_decay=0.1, beta=1.0, alpha=0.8, minutes=300.0)
    default_split = "test"
    metric_help = "log-likelihood per point, next to the oracle's with the true parameters"
    proven_modes = ("eager", "graphs", "compile")  # `--step auto` may pick (training/modes.py)
    eval_data_help = f"the fixed {TEST_BATCHES * TEST_BATCH_SIZE:,}-task test set"
    data_kind = "mog4"
    data_kind_help = ("a fixed test set (split test) of 4-component mixtures for MoG-parameter models: 4 isotropic "
                      "clusters (sigma 0.3), means uniform in (-4, 4)^2, Dirichlet(1) weights, N uniform in "
                      "100..499 per batch of 10; it takes no generator options")

    def data_file(self, seed: int | str) -> str:
        return f"{DATA_DIR}/mog4-test-seed{seed}.h5"

    def generate_data(self, path: Path | None, seed: int, n_tasks: int | None = None, force: bool = False,
                      progress: DataProgress | None = None, **params: Any) -> tuple[Path, dict[str, Any], str]:
        """A fixed test set (split ``test``) of 4-component mixtures; it has no generator parameters."""
        check_generator_params(self, params)
        n_tasks = self.default_tasks if n_tasks is None else n_tasks
        if n_tasks < 1:
            raise ConfigError(f"`tasks` must be >= 1, got {n_tasks}")
        params = ClusteringParams(n_tasks=max(n_tasks, 2), k_min=MogParams.n_clusters, k_max=MogParams.n_clusters,
                                  n_min=MogParams.n_min, n_max=MogParams.n_max)
        check_memory(params.memory_bytes(), host_memory(), f"{n_tasks:,} mog4 tasks", "lower `tasks`")
        path = prepare_output(self, path, seed, force)
        return path, generate_mog_dataset(path, n_tasks, seed, force=force), f"{n_tasks:,} mog4 test tasks"

    def data_config(self, data: Path | None, dataset: str | None, data_dir: Path | None) -> DataConfig:
        if data is not None:  # an option this task does not take: wrong in itself, like image's
            raise ConfigError("mog models train on tasks drawn fresh every step; drop `data` (use it with eval)")
        return super().data_config(data, dataset, data_dir)

    def prepare(self, train_cfg: TrainConfig, data_cfg: DataConfig) -> TrainingData:
        params = MogParams()
        steps = train_cfg.steps_per_epoch or self.defaults.steps_per_epoch
        n_val = train_cfg.val_batches or self.defaults.val_batches
        bs, seed = train_cfg.batch_size, train_cfg.seed
        return TrainingData(
            train=lambda epoch: FreshBatches(steps, bs, seed, 0, epoch, params),
            val=lambda epoch: FreshBatches(n_val, bs, seed, 1, epoch, params),  # fresh validation tasks each epoch
            loss_fn=mog_loss,
        )

    @torch.no_grad()
    def score(self, model: nn.Module, ckpt: Checkpoint, data: Path | None, split: str,
              device: torch.device, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Test LL per point (mean over tasks) next to the oracle LL of the true parameters."""
        if data is None:
            tasks = generate_mog_tasks(TEST_BATCHES, TEST_BATCH_SIZE, TEST_SEED)
            source = f"fixed test set (seed {TEST_SEED}, {len(tasks):,} tasks)"
        else:
            fix = f"; score mog models on a {command_line('gen-data', kind='mog4')} file"
            tasks, source = read_splits(Path(data), split, kind="mog", fix=fix)[0][split], str(data)
        model.eval()
        ll_sum = oracle_sum = 0.0
        batches = mog_batches(tasks, TEST_BATCH_SIZE)
        for k, batch in enumerate(batches, start=1):
            b = batch.to(device)
            ll_sum -= mog_loss(model, b).double().sum().item()
            oracle_sum += oracle_log_likelihood(b).sum().item()
            if progress is not None:
                progress(k, len(batches))
        n = len(tasks)
        return {"data": source, "split": split, "tasks": n, "log_likelihood": ll_sum / n,
                "oracle_log_likelihood": oracle_sum / n}

    def eval_table(self, res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
        return (["", "log-likelihood (nats/point)"],
                [["model", f"{res['log_likelihood']:.4f}"],
                 ["oracle (true parameters)", f"{res['oracle_log_likelihood']:.4f}"]])

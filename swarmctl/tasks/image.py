"""Class-conditional image modelling with the SWARM Transformer (the paper, sec. 4.3): batches of
torchvision images, per-image cross-entropy over sub-pixels, and bits per dimension."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from swarmctl.config import DATA_DIR, DataConfig, TrainConfig
from swarmctl.data.images import (
    DATASETS,
    ImageBatch,
    ImageBatches,
    image_shape,
    load_images,
    shuffled_batches,
)
from swarmctl.errors import ConfigError
from swarmctl.models.image import DEFAULT_DATASET, scan_order
from swarmctl.tasks.base import Task
from swarmctl.training.checkpoint import Checkpoint
from swarmctl.training.loop import TrainingData, validation_loss


def image_loss(model: nn.Module, batch: ImageBatch) -> torch.Tensor:
    """Per image, the mean cross-entropy in nats over its sub-pixels, (B,)."""
    logits = model(batch.x, batch.y)  # (B, T, 256)
    target = scan_order(batch.x)  # (B, T)
    return F.cross_entropy(logits.float().transpose(1, 2), target, reduction="none").mean(dim=1)


class ImageTask(Task):
    name = "image"
    summary = "class-conditional image modelling: 256 logits per sub-pixel, bits/dim"
    defaults = TrainConfig(lr=1e-3, batch_size=50, beta=0.1, alpha=0.9, minutes=480.0)
    default_split = "test"
    sweepable = False  # its data is a dataset name and a folder, not one file
    unit = "images"
    default_data = DATA_DIR  # torchvision root
    proven_modes = ("eager", "amp", "graphs", "amp+graphs", "compile")  # `--step auto` may pick (training/modes.py)
    train_data_help = "none: `dataset` and `data_dir` name their images"
    eval_data_help = "not read: `data_dir` names the folder"
    metric_help = "cross-entropy per sub-pixel and bits per dimension"
    studies = Task.studies | {"sample"}
    datasets = tuple(DATASETS)
    default_dataset = DEFAULT_DATASET

    def data_config(self, data: Path | None, dataset: str | None, data_dir: Path | None) -> DataConfig:
        if data is not None:
            raise ConfigError("image models read torchvision files: use `dataset` and `data_dir`, not `data`")
        return DataConfig(path=str(data_dir or self.default_data), dataset=dataset or self.default_dataset)

    def prepare(self, train_cfg: TrainConfig, data_cfg: DataConfig) -> TrainingData:
        if data_cfg.dataset is None:
            raise ConfigError("image models need `dataset` (mnist, fashion-mnist or cifar10)")
        root = Path(data_cfg.path or self.default_data)
        train = load_images(data_cfg.dataset, root, train=True)
        test = load_images(data_cfg.dataset, root, train=False)  # the official test split validates (as the paper)
        bs, seed = train_cfg.batch_size, train_cfg.seed
        digest = hashlib.sha256()
        for part in (train.images, train.labels, test.images, test.labels):
            digest.update(part.numpy().tobytes())
        return TrainingData(train=lambda epoch: shuffled_batches(train, bs, seed, epoch),
                            val=ImageBatches(test, bs), loss_fn=image_loss, checksum=digest.hexdigest(),
                            val_metrics_of=lambda v: {"val_bits_per_dim": v / math.log(2.0)})

    @torch.no_grad()
    def score(self, model: nn.Module, ckpt: Checkpoint, data: Path | None, split: str,
              device: torch.device, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Cross-entropy per sub-pixel and bits/dim on the test (or train) split."""
        dataset = ckpt.model_config.dataset
        root = Path(data) if data is not None else Path(ckpt.data_config.path or self.default_data)
        if split not in ("test", "train"):
            raise ConfigError(f"`split` must be test or train for image models, got {split!r}")
        images = load_images(dataset, root, train=split == "train")  # its message names `data_dir`, as eval's option
        nats = validation_loss(model, ImageBatches(images, 100), image_loss, device, progress=progress)
        return {"data": f"{dataset} ({root})", "split": split, "tasks": len(images), "loss": nats,
                "bits_per_dim": nats / math.log(2.0)}

    def eval_table(self, res: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
        return (["", "cross-entropy (nats/sub-pixel)", "bits/dim"],
                [["model (class-conditional)", f"{res['loss']:.4f}", f"{res['bits_per_dim']:.4f}"]])

    def example_inputs(self, batch: int, size: int, dtype: torch.dtype = torch.float32,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """``batch`` random images of the default dataset's shape (integer sub-pixel values, as batches hold
        them) and their class labels; ``size`` and ``dtype`` do not apply."""
        shape = image_shape(self.default_dataset)
        images = torch.randint(0, 256, (batch, *shape), generator=generator)
        return images, torch.randint(0, 10, (batch,), generator=generator)

    def progress_note(self, record: dict[str, Any]) -> str:
        return f" ({record['val_bits_per_dim']:.3f} bits/dim)" if "val_bits_per_dim" in record else ""

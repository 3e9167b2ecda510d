"""Tasks a model can be trained on: how to get batches, the loss, the defaults and the evaluation.

Every registered model names its task; ``training.runs`` maps task names to these objects, so the
trainer and the CLI stay the same for every task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from swarmctl.config import DataConfig, TrainConfig
from swarmctl.training.loop import Batches, LossFn


@dataclass(frozen=True)
class Prepared:
    """What the trainer needs: batches, the per-item loss, and the data's identity for resume checks."""

    train: Batches
    val: Batches
    loss_fn: LossFn
    data_checksum: str | None = None
    extra_metrics: Callable[[float], dict[str, float]] | None = None  # more numbers from the val loss


class Task(Protocol):
    name: str
    train_defaults: dict[str, Any]  # TrainConfig fields that differ from the dataclass defaults
    default_data: str | None  # data file used when --data is not given (None: tasks drawn fresh)
    default_split: str  # what eval scores by default

    def prepare(self, train_cfg: TrainConfig, data_cfg: DataConfig) -> Prepared: ...

    def evaluate(self, model: nn.Module, ckpt: dict[str, Any], data: Path | None, split: str,
                 device: torch.device) -> dict[str, Any]: ...

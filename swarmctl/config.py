"""Frozen configuration dataclasses, built once at the CLI boundary and saved with every artifact."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from swarmctl.errors import ConfigError

T = TypeVar("T")

ACTIVATIONS = ("relu", "elu", "leaky-relu")
DATA_DIR = "data"  # default home of generated datasets and of the torchvision image files


def clustering_data_path(seed: int | str = 0) -> str:
    """Where `swarmctl gen-data` writes the clustering tasks of ``seed`` by default."""
    return f"{DATA_DIR}/clustering-seed{seed}.h5"


def mog_test_data_path(seed: int | str = 0) -> str:
    """Where `swarmctl gen-data --task mog4` writes its test tasks by default."""
    return f"{DATA_DIR}/mog4-test-seed{seed}.h5"


def _check_positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class ModelConfig:
    """Which model to build and its hyper-parameters.

    Fields left at None take the registered model's default (its best configuration in the paper);
    :func:`swarmctl.models.complete_config` fills them in, so saved configs are always complete.
    """

    name: str = "swarm"
    dim_in: int = 2
    dim_out: int = 10
    dim_hidden: int | None = None
    n_iter: int | None = None
    n_layers: int | None = None
    n_inducing: int | None = None
    n_heads: int | None = None
    pooling: str | None = None
    dropout: float = 0.0
    activation: str = "relu"
    dataset: str | None = None  # image models: which image shape to build for

    def __post_init__(self) -> None:
        _check_positive(self, "dim_in", "dim_out", "dim_hidden", "n_iter", "n_layers", "n_inducing", "n_heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config as a dict of JSON types."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a config; unknown keys are an error (they mean another version wrote the file)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    return cls(**data)


DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (protocol sec. 2.6-2.7). ``minutes`` counts optimisation time only."""

    lr: float = 0.01
    batch_size: int = 100
    minutes: float = 60.0
    max_epochs: int = 1000
    seed: int = 0
    device: str = "auto"
    amp: bool = False
    compile: bool = False
    beta: float = 0.2
    alpha: float = 0.9
    steps_per_epoch: int | None = None  # None: one pass over the training batches
    val_batches: int | None = None  # tasks drawn fresh: validation batches per epoch
    lr_decay_epoch: int | None = None  # multiply the lr by lr_decay once, at the start of this epoch
    lr_decay: float = 0.1

    def __post_init__(self) -> None:
        _check_positive(self, "steps_per_epoch", "val_batches")
        if self.lr_decay_epoch is not None and self.lr_decay_epoch < 0:
            raise ConfigError(f"lr_decay_epoch must be >= 0, got {self.lr_decay_epoch}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        _check_positive(self, "batch_size", "max_epochs")
        if not self.minutes > 0:
            raise ConfigError(f"minutes must be > 0, got {self.minutes}")
        if not (self.device in DEVICES or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be one of {', '.join(DEVICES)} or cuda:N, got {self.device!r}")
        if not self.beta >= 0:
            raise ConfigError(f"beta must be >= 0, got {self.beta}")
        if not 0 < self.alpha <= 1:
            raise ConfigError(f"alpha must be in (0, 1], got {self.alpha}")


@dataclass(frozen=True)
class DataConfig:
    """Where the training data lives and which splits to use (``path`` None: tasks drawn fresh)."""

    path: str | None = clustering_data_path(0)
    train_split: str = "train"
    val_split: str = "val"
    dataset: str | None = None  # image task: mnist, fashion-mnist or cifar10 (path = torchvision root)

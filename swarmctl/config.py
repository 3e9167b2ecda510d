"""Frozen configuration dataclasses, built once at the CLI boundary and saved with every artifact."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from swarmctl.errors import ConfigError, ResourceError

T = TypeVar("T")

DATA_DIR = "data"  # the one data folder: generated datasets and the torchvision image files (train, the campaigns)


def _check_positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value < 1:
            raise ConfigError(f"`{name}` must be >= 1, got {value}")


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
    dataset: str | None = None  # image models: which image shape to build for

    def __post_init__(self) -> None:
        _check_positive(self, "dim_in", "dim_out", "dim_hidden", "n_iter", "n_layers", "n_inducing", "n_heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"`dropout` must be in [0, 1), got {self.dropout}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config as a dict of JSON types."""
    return dataclasses.asdict(cfg)


# Fields that earlier versions wrote and this one dropped, each at the one value it could hold (no option set
# it): a saved config holding one at that value reads as if it were not there; any other value is unknown.
RETIRED: dict[str, dict[str, Any]] = {"ModelConfig": {"activation": "relu"},
                                      "DataConfig": {"train_split": "train", "val_split": "val"}}


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a config; unknown keys are an error (they mean another version wrote the file), except the
    :data:`RETIRED` fields at their one value."""
    retired = RETIRED.get(cls.__name__, {})
    data = {k: v for k, v in data.items() if not (k in retired and v == retired[k])}
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in data and not _has_type(data[f.name], str(f.type)):
            raise ConfigError(f"{cls.__name__}.{f.name} must be {f.type}, got {data[f.name]!r}")
    return cls(**data)


_JSON_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
                                            "None": (type(None),)}


def _has_type(value: Any, annotation: str) -> bool:
    """``value`` is of one of the JSON types the annotation names (``int | None``, ...); bool is no int."""
    allowed = tuple(t for part in annotation.split("|") for t in _JSON_TYPES.get(part.strip(), (object,)))
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


DEVICES = ("auto", "cpu", "cuda")
SEED_RANGE = (0, 2**32 - 1)  # what NumPy's RandomState accepts


def check_device(name: str) -> None:
    """A device name swarmctl accepts: auto, cpu, cuda or cuda:N."""
    index = name[5:] if name.startswith("cuda:") else None
    if not (name in DEVICES or (index is not None and index.isdigit())):
        raise ConfigError(f"`device` must be auto, cpu, cuda or cuda:N, got {name!r}")


def check_seed(seed: int, name: str = "seed") -> None:
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ConfigError(f"`{name}` must be in {SEED_RANGE[0]}..{SEED_RANGE[1]} (2^32 - 1), got {seed}")


def check_finite(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ConfigError(f"`{name}` must be a finite number, got {value}")


def check_positive(name: str, value: float) -> None:
    """A finite number > 0."""
    check_finite(name, value)
    if not value > 0:
        raise ConfigError(f"`{name}` must be > 0, got {value}")


def check_memory(needed: float, limit: float, what: str, fix: str) -> None:
    """Refuse work whose estimated memory ``needed`` (bytes) exceeds ``limit`` (bytes), before any
    allocation, naming both and the fix."""
    if needed > limit:
        raise ResourceError(f"{what} needs about {_gib(needed)} of memory, more than the {_gib(limit)} available; "
                          f"{fix}")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**50 else f"{n / 2**30:.2g} GiB"


def host_memory() -> int:
    """This machine's physical memory in bytes (the limit of the up-front memory checks on the CPU)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: no check beyond a generous bound
        return 2**40


MAX_LR = 1.0  # Adam with a step size above 1 diverges on every model here


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
    cuda_graphs: bool = False  # on CUDA: each step shape captured once and replayed (training/steps.py)
    beta: float = 0.2
    alpha: float = 0.9
    steps_per_epoch: int | None = None  # None: one pass over the training batches
    val_batches: int | None = None  # tasks drawn fresh: validation batches per epoch
    lr_decay_epoch: int | None = None  # multiply the lr by lr_decay once, at the start of this epoch
    lr_decay: float = 0.1

    def __post_init__(self) -> None:
        _check_positive(self, "steps_per_epoch", "val_batches")
        if self.lr_decay_epoch is not None and self.lr_decay_epoch < 0:
            raise ConfigError(f"`lr_decay_epoch` must be >= 0, got {self.lr_decay_epoch}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"`lr_decay` must be in (0, 1], got {self.lr_decay}")
        if not 0 < self.lr <= MAX_LR:
            raise ConfigError(f"`lr` must be in (0, {MAX_LR:g}], got {self.lr}")
        _check_positive(self, "batch_size", "max_epochs")
        if not self.minutes > 0:
            raise ConfigError(f"`minutes` must be > 0, got {self.minutes}")
        check_device(self.device)
        check_seed(self.seed)
        if not 0 <= self.beta < math.inf:
            raise ConfigError(f"`beta` must be a finite number >= 0, got {self.beta}")
        if not 0 < self.alpha <= 1:
            raise ConfigError(f"`alpha` must be in (0, 1], got {self.alpha}")


@dataclass(frozen=True)
class DataConfig:
    """Where the training data lives (``path`` None: tasks drawn fresh)."""

    path: str | None = None
    dataset: str | None = None  # image task: mnist, fashion-mnist or cifar10 (path = torchvision root)
    checksum: str | None = None  # of the data a run trained on (set by the run; None: not yet read, or drawn fresh)


def current_sections(config: dict[str, Any]) -> dict[str, Any]:
    """A saved run config (``config.json``, a checkpoint's) with its model, train and data sections as this
    version writes them: the :data:`RETIRED` fields dropped. Raises like :func:`from_dict`."""
    sections = {"model": ModelConfig, "train": TrainConfig, "data": DataConfig}
    return {**config, **{key: to_dict(from_dict(cls, config[key])) for key, cls in sections.items()}}

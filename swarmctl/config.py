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
    :data:`RETIRED` fields at their one value, and a TrainConfig's retired step switches (folded into ``step``)."""
    retired = RETIRED.get(cls.__name__, {})
    data = {k: v for k, v in data.items() if not (k in retired and v == retired[k])}
    if cls.__name__ == "TrainConfig":
        data = _fold_switches(data)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    check_types(cls, data, prefix=f"{cls.__name__}.")
    return cls(**data)


_JSON_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
                                            "None": (type(None),)}


def has_type(value: Any, annotation: str) -> bool:
    """``value`` is of one of the JSON types the annotation names (``int | None``, ...); bool is no int."""
    allowed = tuple(t for part in annotation.split("|") for t in _JSON_TYPES.get(part.strip(), (object,)))
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


DEVICES = ("auto", "cpu", "cuda")
SEED_RANGE = (0, 2**32 - 1)  # what NumPy's RandomState accepts


def check_device(name: str) -> None:
    index = name[5:] if name.startswith("cuda:") else None
    if not (name in DEVICES or (index is not None and index.isdigit())):
        raise ConfigError(f"`device` must be auto, cpu, cuda or cuda:N, got {name!r}")


def check_seed(seed: int, name: str = "seed") -> None:
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ConfigError(f"`{name}` must be in {SEED_RANGE[0]}..{SEED_RANGE[1]} (2^32 - 1), got {seed}")


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
STEP_MODES = ("auto", "eager", "amp", "graphs", "amp+graphs", "compile", "amp+compile", "triton", "amp+triton",
              "triton+graphs", "amp+triton+graphs")  # the one list of step modes (training/modes.py reads it)
STEP_PARTS = ("amp", "triton", "graphs", "compile")  # what a mode's name is made of, in its order
# the switches earlier versions saved beside `step`: a saved config holding them is read as the mode they make
_RETIRED_SWITCHES = {"amp": "amp", "triton": "triton", "cuda_graphs": "graphs", "compile": "compile"}


def step_parts(mode: str) -> frozenset[str]:
    """The parts (:data:`STEP_PARTS`) of step mode ``mode``, a name of :data:`STEP_MODES` other than auto."""
    return frozenset() if mode == "eager" else frozenset(mode.split("+"))


def check_step(step: str) -> None:
    if step not in STEP_MODES:
        raise ConfigError(f"unknown `step` {step!r}; choose one of {', '.join(STEP_MODES)}")


def _fold_switches(data: dict[str, Any]) -> dict[str, Any]:
    """A saved TrainConfig section with the switches of earlier versions (``amp``, ``compile``, ``triton``,
    ``cuda_graphs``) folded into ``step``: ``auto`` becomes the mode the switches make (eager when all are
    off: such a run trained eagerly), a named mode must be the one they make."""
    if not set(_RETIRED_SWITCHES) & set(data):
        return data
    for key in _RETIRED_SWITCHES:
        if key in data and not isinstance(data[key], bool):
            raise ConfigError(f"TrainConfig.{key} must be bool, got {data[key]!r}")
    on = frozenset(_RETIRED_SWITCHES[k] for k in _RETIRED_SWITCHES if data.get(k))
    made = [m for m in STEP_MODES[1:] if step_parts(m) == on]
    step = data.get("step", "auto")
    given = ", ".join(f"`{k}`" for k in sorted(k for k in _RETIRED_SWITCHES if data.get(k)))
    if not made:
        raise ConfigError(f"{given} make no step mode; choose `step` from {', '.join(STEP_MODES[1:])}")
    if step in STEP_MODES[1:] and on and step_parts(step) != on:
        raise ConfigError(f"`step` {step} and {given} disagree; give the mode with `step` alone")
    rest = {k: v for k, v in data.items() if k not in _RETIRED_SWITCHES}
    return {**rest, "step": made[0] if step == "auto" else step}


def train_option(default: Any, help: str, *, sweep: bool = False, resume: bool = False) -> Any:
    """A :class:`TrainConfig` field that users set: `train`'s option ``--FIELD`` (a bool is a switch) with
    ``help``, one phrase without a final period (the help adds each task's default, from its ``TrainConfig``;
    ``{FIELD}`` in it shows another field's default), a key of a sweep spec when ``sweep``, and an option
    `train --resume` may change when ``resume``. :data:`TRAIN_OPTIONS` is the table these fields make; their
    values are checked by ``__post_init__``."""
    return dataclasses.field(default=default, metadata={"help": help, "sweep": sweep, "resume": resume})


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (the paper, sec. 4.1.3, Setup). ``minutes`` counts optimisation time only. Each field
    made by :func:`train_option` is an option of `swarmctl train` (see :data:`TRAIN_OPTIONS`)."""

    lr: float = train_option(0.01, "Adam learning rate")
    batch_size: int = train_option(100, "Tasks (images) per batch", sweep=True)
    minutes: float = train_option(60.0, "Net optimisation budget in minutes (validation and checkpoints excluded)",
                                  sweep=True, resume=True)
    max_epochs: int = train_option(1000, "Stop after this many epochs", sweep=True, resume=True)
    # a sweep spec gives a list of them, `seeds`
    seed: int = train_option(0, "Seed (0 to 2^32 - 1) for initialisation, batch order and drawn tasks")
    device: str = train_option("auto", "auto, cpu, cuda or cuda:N", sweep=True, resume=True)
    step: str = train_option("auto", "Step mode: auto (on CUDA the mode measured fastest on this card for the "
                                     "model's task in the budget, eager on a card not measured; eager off CUDA), "
                                     "or " + ", ".join(STEP_MODES[1:]), sweep=True)
    beta: float = train_option(0.2, "Backtracking: fraction of epochs without improvement")
    alpha: float = train_option(0.9, "Backtracking: learning-rate factor")
    steps_per_epoch: int | None = train_option(None, "Steps per epoch")  # None: one pass over the training batches
    val_batches: int | None = train_option(None, "Validation batches per epoch (tasks drawn fresh)")
    lr_decay_epoch: int | None = train_option(None, "Multiply the lr by {lr_decay} once, from this epoch on")
    lr_decay: float = 0.1

    def __post_init__(self) -> None:
        _check_positive(self, "batch_size", "max_epochs", "steps_per_epoch", "val_batches")
        if self.lr_decay_epoch is not None and self.lr_decay_epoch < 0:
            raise ConfigError(f"`lr_decay_epoch` must be >= 0, got {self.lr_decay_epoch}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"`lr_decay` must be in (0, 1], got {self.lr_decay}")
        if not 0 < self.lr <= MAX_LR:
            raise ConfigError(f"`lr` must be in (0, {MAX_LR:g}], got {self.lr}")
        if not math.isfinite(self.minutes):
            raise ConfigError(f"`minutes` must be a finite number, got {self.minutes}")
        if not self.minutes > 0:
            raise ConfigError(f"`minutes` must be > 0, got {self.minutes}")
        check_device(self.device)
        check_step(self.step)
        check_seed(self.seed)
        if not 0 <= self.beta < math.inf:
            raise ConfigError(f"`beta` must be a finite number >= 0, got {self.beta}")
        if not 0 < self.alpha <= 1:
            raise ConfigError(f"`alpha` must be in (0, 1], got {self.alpha}")


@dataclass(frozen=True)
class TrainOption:
    """A row of :data:`TRAIN_OPTIONS`: a :class:`TrainConfig` field users set (see :func:`train_option`)."""

    field: str
    type: str  # the field's annotation: int, float, str, bool, int | None
    help: str
    sweep: bool
    resume: bool


# `train`'s options, a sweep spec's training keys, what a resume may change: the user-set fields, in field order
TRAIN_OPTIONS = tuple(TrainOption(f.name, str(f.type), f.metadata["help"], f.metadata["sweep"], f.metadata["resume"])
                      for f in fields(TrainConfig) if "help" in f.metadata)
RESUMABLE = tuple(o.field for o in TRAIN_OPTIONS if o.resume)  # the train options a resume may change
SWEEP_KEYS = tuple(o.field for o in TRAIN_OPTIONS if o.sweep)  # the TrainConfig fields a sweep spec may set


def check_types(cls: type, values: dict[str, Any], prefix: str = "") -> None:
    """Each of ``values`` (JSON or TOML values by field name) has the type of ``cls``'s field; bool is no int."""
    types = {f.name: str(f.type) for f in fields(cls)}
    for name, value in values.items():
        if not has_type(value, types[name]):
            raise ConfigError(f"{prefix}{name} must be {types[name]}, got {value!r}")


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

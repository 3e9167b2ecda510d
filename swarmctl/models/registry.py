"""One registry of models: a decorator to add a builder, a factory to create models from a config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from swarmctl.config import ModelConfig
from swarmctl.errors import ConfigError, either

Builder = Callable[[ModelConfig], nn.Module]

# How a model's output answers a permutation of its input set (every model's ``symmetry`` attribute):
# equivariant: per-entity outputs permute with the input; invariant: one output per set, unchanged;
# causal: entity i sees entities 0..i only (ordered sequences such as images); order-dependent: none of these.
SYMMETRIES = ("equivariant", "invariant", "causal", "order-dependent")


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its builder, the fields forming its paper code, and its defaults."""

    name: str
    build: Builder
    code_fields: tuple[str, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    task: str = "clustering"  # what the model is trained on: "clustering", "mog", ...
    extra_fields: tuple[str, ...] = ()  # hyper-parameters it reads beyond its code and defaults (dropout)

    @property
    def fields(self) -> frozenset[str]:
        """The ModelConfig hyper-parameters this model reads (those a user may set)."""
        return frozenset(self.code_fields) | (frozenset(self.defaults) - {"dataset"}) | frozenset(self.extra_fields)

    @property
    def code_format(self) -> str:
        """The paper code's letters, e.g. ``H-T-L`` for SWARM."""
        labels = {h.field: h.label for h in HYPERPARAMETERS}
        return "-".join(labels.get(f) or f for f in self.code_fields)


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str, *, code: tuple[str, ...], defaults: dict[str, Any], summary: str = "", task: str = "clustering",
    extra_fields: tuple[str, ...] = (),
) -> Callable[[Builder], Builder]:
    """Register ``build(cfg) -> nn.Module`` under ``name`` (a kebab-case CLI name) for ``task``; the model
    reads the fields of ``code``, of ``defaults`` and ``extra_fields``, and no other hyper-parameter."""

    def add(build: Builder) -> Builder:
        if name in _REGISTRY:
            raise ValueError(f"model {name!r} is registered twice")
        _REGISTRY[name] = ModelSpec(name, build, code, dict(defaults), summary or (build.__doc__ or "").strip(), task,
                                    tuple(extra_fields))
        return build

    return add


def list_models(task: str | None = None) -> list[str]:
    return sorted(n for n, s in _REGISTRY.items() if task is None or s.task == task)


def get_spec(name: str) -> ModelSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(list_models())}") from None


@dataclass(frozen=True)
class HyperParameter:
    """A ModelConfig field that users set: ``train``'s option ``--OPTION`` and a sweep grid's key ``OPTION``
    (the grids take the fields of a model's paper code). Each model reads some of them (``ModelSpec.fields``)."""

    field: str
    option: str
    type: type
    help: str
    label: str = ""  # its letter in the paper's architecture code (SWARM's 192-10-1 is H-T-L)


# The one table of model hyper-parameters: train's options and the sweep grids' keys come from it, so a new
# hyper-parameter is a ModelConfig field, a row here and the models that read it.
HYPERPARAMETERS: tuple[HyperParameter, ...] = (
    HyperParameter("dim_hidden", "hidden", int, "Hidden units H", "H"),
    HyperParameter("n_iter", "iters", int, "SWARM iterations T", "T"),
    HyperParameter("n_layers", "layers", int, "Layers L", "L"),
    HyperParameter("n_inducing", "inducing", int, "Set Transformer inducing points m", "m"),
    HyperParameter("n_heads", "heads", int, "Attention heads (must divide the hidden units)"),
    HyperParameter("pooling", "pooling", str, "SWARM pooling inside the cell: mean or causal"),
    HyperParameter("dropout", "dropout", float, "SWARM dropout on h after every iteration"),
)
OPTION_NAMES = {h.field: h.option for h in HYPERPARAMETERS}  # ModelConfig field -> the name users give it


def check_fields(name: str, given: set[str] | frozenset[str]) -> None:
    """Refuse hyper-parameters (ModelConfig field names) that model ``name`` does not read: a value it
    would ignore, yet record in its config, is a mistake."""
    spec = get_spec(name)
    bad = sorted(set(given) - spec.fields, key=list(OPTION_NAMES).index)
    if bad:
        takes = [f"`{f}`" for f in OPTION_NAMES if f in spec.fields]
        raise ConfigError(f"model {name} has no {either(f'`{f}`' for f in bad)}; it takes "
                          f"{either(takes, 'and') or 'no hyper-parameter'}")


def complete_config(cfg: ModelConfig) -> ModelConfig:
    spec = get_spec(cfg.name)
    missing = {k: v for k, v in spec.defaults.items() if getattr(cfg, k) is None}
    return dataclasses.replace(cfg, **missing)


def paper_code(cfg: ModelConfig) -> str:
    """The paper's architecture code, e.g. ``192-10-1`` for SWARM (hidden-iters-layers)."""
    cfg = complete_config(cfg)
    return "-".join(str(getattr(cfg, f)) for f in get_spec(cfg.name).code_fields)


def create_model(cfg: ModelConfig) -> nn.Module:
    """Build the model ``cfg.name`` (defaults filled in). Unknown names and hyper-parameters the layers
    refuse (an unknown pooling, say) raise ConfigError."""
    cfg = complete_config(cfg)
    try:
        return get_spec(cfg.name).build(cfg)
    except ValueError as exc:  # the layers check their arguments with ValueError
        raise ConfigError(f"model {cfg.name}: {exc}; see `swarmctl models` and `swarmctl train {cfg.name} "
                          "--help`") from None


def check_heads_divide_hidden(cfg: ModelConfig) -> None:
    """Attention splits the hidden units evenly over the heads."""
    if cfg.dim_hidden % cfg.n_heads != 0:
        raise ConfigError(f"`heads` ({cfg.n_heads}) must divide `hidden` ({cfg.dim_hidden}); choose a hidden size "
                          "that is a multiple of the heads, or other heads")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

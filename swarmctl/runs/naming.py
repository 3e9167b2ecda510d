"""What a run is before it trains, for `train` and `sweep` alike: its default name, and the refusal of a model
whose training state would not fit the device's memory (counted on the meta device, nothing allocated)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from swarmctl.config import ModelConfig, check_memory
from swarmctl.errors import ResourceError
from swarmctl.models import count_parameters, create_model, paper_code

LOWER_SIZES = "lower `hidden`, `layers` or `inducing`"  # the fix for a model too large to train here


def run_name(model_cfg: ModelConfig, seed: int) -> str:
    """A run's default name, MODEL-CODE-sSEED, e.g. ``swarm-192-10-1-s0`` (``model_cfg`` complete)."""
    return f"{model_cfg.name}-{paper_code(model_cfg)}-s{seed}"


def _label(model_cfg: ModelConfig) -> str:
    return f"model {model_cfg.name} ({paper_code(model_cfg)})"


# Weight initialisers: on the meta device they fill nothing, yet their reference implementations were half of
# the time `sweep --dry-run` took to count a grid's hundreds of models (1.2 s of 2.5 s for the paper's 120 Set
# Transformers). A Tensor method's tensor is args[0]; an nn.init function's is args[0] or `tensor=`.
_INITIALISERS = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.zero_, torch.Tensor.fill_,
                           torch.nn.init.normal_, torch.nn.init.uniform_, torch.nn.init.trunc_normal_,
                           torch.nn.init.kaiming_normal_, torch.nn.init.kaiming_uniform_})


class _SkipInitialisers(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _INITIALISERS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def parameter_count(model_cfg: ModelConfig, fix: str | None = None) -> int:
    """The parameters of ``model_cfg``'s model, built on the meta device without initialising its weights:
    nothing is allocated, whatever the size, and every hyper-parameter the model checks is checked. A size
    whose byte count overflows even there is a ResourceError (``fix``, when given, says what to do)."""
    try:
        with torch.device("meta"), _SkipInitialisers():
            return count_parameters(create_model(model_cfg))
    except RuntimeError:  # a size whose byte count overflows even on the meta device
        raise ResourceError(f"{_label(model_cfg)} is too large to build on any machine"
                            + (f"; {fix}" if fix else "")) from None


def training_state_bytes(parameters: int) -> int:
    """Bytes of a float32 model's training state: weights, gradients and Adam's two moments, 4 floats per
    parameter (activations not counted)."""
    return 16 * parameters


def check_training_memory(model_cfg: ModelConfig, parameters: int, limit: float, fix: str) -> None:
    """Refuse a model of ``parameters`` whose weights, gradients and Adam state alone exceed ``limit`` bytes,
    before anything is allocated, saying ``fix``."""
    check_memory(training_state_bytes(parameters), limit, f"{_label(model_cfg)} with {parameters:,} parameters "
                 "(weights, gradients and Adam state)", fix)

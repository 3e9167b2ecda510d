"""swarmctl: SWARM mappings (set-equivariant recurrent layers), baselines, and the paper's experiments.

``create_model``, ``list_models``, ``count_parameters`` and ``ModelConfig`` are loaded on first use, so
that torch-free parts (figures from saved results) import without torch.
"""

import importlib
from typing import Any

__version__ = "0.2.0"

_LAZY = {"create_model": "swarmctl.models", "list_models": "swarmctl.models",
         "count_parameters": "swarmctl.models", "ModelConfig": "swarmctl.config"}

__all__ = ["ModelConfig", "__version__", "count_parameters", "create_model", "list_models"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'swarmctl' has no attribute {name!r}")

"""swarmctl: SWARM mappings (set-equivariant recurrent layers), baselines, and the paper's experiments."""

__version__ = "0.1.0"

from swarmctl.config import ModelConfig  # noqa: E402
from swarmctl.models import count_parameters, create_model, list_models  # noqa: E402

__all__ = ["ModelConfig", "__version__", "count_parameters", "create_model", "list_models"]

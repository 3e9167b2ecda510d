"""Model registry and the model families; importing this package registers every model."""

from swarmctl.models import (  # noqa: F401  (registration)
    bilstm,
    image,
    mog,
    set_linear,
    set_transformer,
    swarm,
    swarm_count,
)
from swarmctl.models.registry import (
    HYPERPARAMETERS,
    HyperParameter,
    ModelSpec,
    check_fields,
    complete_config,
    count_parameters,
    create_model,
    get_spec,
    list_models,
    paper_code,
    register_model,
)

__all__ = [
    "HYPERPARAMETERS",
    "HyperParameter",
    "ModelSpec",
    "check_fields",
    "complete_config",
    "count_parameters",
    "create_model",
    "get_spec",
    "list_models",
    "paper_code",
    "register_model",
]

"""Checkpoints: model and optimizer state, training state, the full config and the package version,
written atomically and loaded with ``weights_only=True``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from swarmctl import __version__
from swarmctl.errors import CheckpointError
from swarmctl.files import atomic_write

CHECKPOINT_FORMAT = 1


def save_checkpoint(path: Path, *, model_state: dict, optimizer_state: dict | None, state: dict,
                    config: dict[str, Any], task: str) -> None:
    """Write a checkpoint atomically. ``state`` and ``config`` must hold JSON types only."""
    json.dumps(config)  # fail here, not at load time, if a config value is not a JSON type
    payload = {
        "format": CHECKPOINT_FORMAT,
        "swarmctl_version": __version__,
        "task": task,
        "config": config,
        "state": state,
        "model": model_state,
        "optimizer": optimizer_state,
    }
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and validate a checkpoint written by :func:`save_checkpoint`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for foreign or damaged files
        raise CheckpointError(f"{path} is not a readable swarmctl checkpoint ({type(exc).__name__})") from None
    if not isinstance(ckpt, dict) or "format" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} is not a swarmctl checkpoint")
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} has checkpoint format {ckpt['format']} (swarmctl {ckpt.get('swarmctl_version', '?')}); "
            f"this swarmctl {__version__} reads format {CHECKPOINT_FORMAT}"
        )
    return ckpt


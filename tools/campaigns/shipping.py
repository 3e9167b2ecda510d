"""A trained checkpoint written as a shipped model: the one writer of a folder of shipped models
(:func:`swarmctl.runs.shipped_models` reads them by their records)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from swarmctl.files import atomic_write_text, holding
from swarmctl.models import count_parameters, create_model, paper_code
from swarmctl.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint


def export_weights(checkpoint: Path, dest: Path, data_path: str | None = None,
                   record: dict[str, Any] | None = None) -> None:
    """Write ``checkpoint`` as a shipped model: ``dest`` without its optimizer state (float32 weights,
    config, training state) and its record ``dest.json`` (model, task, dataset, size, net minutes, best
    epoch, config, plus ``record``: e.g. the command, the card, the epochs and the evaluation).
    ``data_path`` replaces the dataset path recorded in its config."""
    dest = Path(dest)
    full = load_checkpoint(checkpoint)
    config = full.config if data_path is None else {**full.config, "data": {**full.config["data"], "path": data_path}}
    weights = {k: v.float() if v.is_floating_point() else v for k, v in full.model.items()}
    ckpt = Checkpoint(full.task, config, full.state, weights, None)
    cfg = ckpt.model_config
    with torch.device("meta"):
        parameters = count_parameters(create_model(cfg))
    base = {"file": dest.name, "model": cfg.name, "code": paper_code(cfg), "task": ckpt.task, "dataset": cfg.dataset,
            "parameters": parameters, "net_minutes": round(ckpt.state.net_seconds / 60, 2),
            "best_epoch": ckpt.state.best_epoch, "config": ckpt.config}
    with holding(dest.parent):  # the one writer of a folder of shipped models
        save_checkpoint(dest, ckpt)
        atomic_write_text(dest.with_suffix(".json"), json.dumps({**base, **(record or {})}, indent=2) + "\n")

"""Class-conditional samples from a trained SWARM Transformer, and finding the newest image run."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from swarmctl.errors import CheckpointError, ConfigError


@dataclass(frozen=True)
class SampleGrid:
    """images (n_classes, per_class, C, H, W) uint8; row k holds class k."""

    images: np.ndarray
    label: str
    temperature: float
    seed: int
    seconds: float


@torch.no_grad()
def sample_grid(model: nn.Module, label: str, per_class: int = 2, temperature: float = 1.0, seed: int = 0,
                n_classes: int = 10, incremental: bool = True, device: torch.device | str = "cpu") -> SampleGrid:
    """``per_class`` images for each class, drawn together in one batch."""
    if per_class < 1:
        raise ConfigError(f"per_class must be >= 1, got {per_class}")
    y = torch.arange(n_classes, device=device).repeat_interleave(per_class)
    gen = torch.Generator(device=device).manual_seed(seed)
    start = time.perf_counter()
    images = model.sample(y, temperature=temperature, generator=gen, incremental=incremental).cpu().numpy()
    C, H, W = images.shape[1:]
    return SampleGrid(images.reshape(n_classes, per_class, C, H, W), label, temperature, seed,
                      time.perf_counter() - start)


def newest_image_run(runs_dir: Path, dataset: str) -> Path:
    """The run in ``runs_dir`` with the most recently written best.pt whose model is an image model for
    ``dataset``."""
    found = []
    for cfg_path in Path(runs_dir).glob("*/config.json"):
        cfg = json.loads(cfg_path.read_text())
        best = cfg_path.with_name("best.pt")
        if cfg.get("run", {}).get("task") == "image" and cfg["model"].get("dataset") == dataset and best.is_file():
            found.append((best.stat().st_mtime, cfg_path.parent))
    if not found:
        raise CheckpointError(f"no trained image run for {dataset} in {runs_dir}; train one with "
                              f"`swarmctl train swarm-image --dataset {dataset}` or pass --run")
    return max(found)[1]

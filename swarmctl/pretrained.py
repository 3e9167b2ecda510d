"""Models trained on a GPU and shipped with swarmctl: weights only (float32) with their config and
training state, in the repository's ``pretrained/`` folder (or the folder SWARMCTL_PRETRAINED names).

``eval``, ``plot-entropy`` and ``sample`` fall back to these when no local run is named, so they work on
a fresh checkout; ``pretrained/README.md`` says how each was trained and what it scored.
"""

from __future__ import annotations

import os
from pathlib import Path

from swarmctl.errors import CheckpointError
from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint
from swarmctl.training.clustering import ClusteringTask

CLUSTERING = ClusteringTask.name


def pretrained_dir() -> Path:
    env = os.environ.get("SWARMCTL_PRETRAINED")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "pretrained"


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is one of the shipped checkpoints (whose folder commands must not write into)."""
    return Path(path).resolve().parent == pretrained_dir().resolve()


def results_dir(checkpoint: Path, runs_dir: Path) -> Path:
    """Where commands write what they compute from a shipped checkpoint (never into ``pretrained/``)."""
    return Path(runs_dir) / f"pretrained-{Path(checkpoint).stem}"


def shipped_checkpoint(task: str = CLUSTERING, dataset: str | None = None) -> Path:
    """The shipped checkpoint for ``task`` (and, for images, ``dataset``); CheckpointError if none."""
    for path in sorted(pretrained_dir().glob("*.pt")):
        ckpt = load_checkpoint(path)
        if ckpt["task"] == task and (dataset is None or ckpt["config"]["model"].get("dataset") == dataset):
            return path
    what = f"{task} ({dataset})" if dataset else task
    raise CheckpointError(f"no shipped {what} model in {pretrained_dir()}; name a run, or train one with "
                          "`swarmctl train`")


def missing_data(checkpoint: Path) -> Path | None:
    """The clustering dataset a shipped checkpoint is scored on, when it is not there yet (a fresh
    checkout): the caller generates it (seed 0) before use. None when nothing is missing."""
    ckpt = load_checkpoint(checkpoint)
    path = Path(ckpt["config"]["data"]["path"] or ClusteringTask.default_data)
    return path if ckpt["task"] == CLUSTERING and is_shipped(checkpoint) and not path.exists() else None


def export_weights(checkpoint: Path, dest: Path, data_path: str | None = None) -> None:
    """Write ``checkpoint`` without its optimizer state (float32 weights, config, training state) to
    ``dest``; ``data_path`` replaces the dataset path recorded in the config (e.g. the default file)."""
    ckpt = load_checkpoint(checkpoint)
    config = ckpt["config"]
    if data_path is not None:
        config = {**config, "data": {**config["data"], "path": data_path}}
    weights = {k: v.float() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    save_checkpoint(Path(dest), model_state=weights, optimizer_state=None, state=ckpt["state"], config=config,
                    task=ckpt["task"])

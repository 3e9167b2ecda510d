"""A run's folder layout: the one place that names a run's files (``tests/test_layout.py`` checks that no
other module spells one), and the metrics schema. Standard library only: it sits under everything that
writes, protects or reads these files (docs/design.md, "A run")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.json"  # the run's configs (sections model, train, data, run)
METRICS = "metrics.jsonl"  # a JSON line per epoch (METRICS_KEYS at least)
BEST = "best.pt"  # the checkpoint of the best validation loss
LAST = "last.pt"  # the checkpoint after the latest epoch (or the position an interrupted epoch reached)
CURVES = "curves.png"  # drawn from the metrics after training
LOCK = ".lock"  # flock-ed by the process writing the run, holds its PID; no output ever takes this name

RUN_FILES = (CONFIG, METRICS, BEST, LAST)  # a run's own files: only its writer writes them
RESTARTABLE = (METRICS, BEST, LAST, CURVES)  # what a restart from scratch clears
CHECKPOINTS = (BEST, LAST)  # in the order a reader prefers them

# The metrics schema: every line of metrics.jsonl holds these keys (the trainer writes more: batches,
# backtracks, eval_seconds and the task's numbers derived from the validation loss).
METRICS_KEYS = ("epoch", "train_loss", "val_loss", "best_val", "lr", "net_seconds", "backtracked")


@dataclass(frozen=True)
class RunDir:
    """The folder of one run and the path of each of its files."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    config = property(lambda self: self.path / CONFIG)
    metrics = property(lambda self: self.path / METRICS)
    best = property(lambda self: self.path / BEST)
    last = property(lambda self: self.path / LAST)
    curves = property(lambda self: self.path / CURVES)
    lock = property(lambda self: self.path / LOCK)

    @property
    def name(self) -> str:
        return self.path.name

    def checkpoints(self) -> tuple[Path, ...]:
        return tuple(self.path / name for name in CHECKPOINTS)

    def own_files(self) -> tuple[Path, ...]:
        """Every file of the run but its lock: config, metrics, checkpoints, curves."""
        return (self.config, *(self.path / name for name in RESTARTABLE))

    def restartable(self) -> tuple[Path, ...]:
        return tuple(self.path / name for name in RESTARTABLE)

    def has_run(self) -> bool:
        return self.config.is_file()

    def is_dead(self) -> bool:
        """A run folder with a config but no checkpoint: killed or failed in its first epoch."""
        return self.config.is_file() and not self.last.is_file()

    @staticmethod
    def all_in(runs_dir: Path) -> Iterator[RunDir]:
        """Every run folder directly inside ``runs_dir`` (one with a config), by name."""
        for config in sorted(Path(runs_dir).glob(f"*/{CONFIG}")):
            yield RunDir(config.parent)


def is_run_file(path: Path) -> bool:
    """Whether ``path`` names one of a run's own files (:data:`RUN_FILES`) in a folder that holds a run."""
    path = Path(path)
    return path.name in RUN_FILES and (path.parent / CONFIG).exists()

"""Result dataclasses of the studies: numpy arrays only (no torch), saved to and loaded from NPZ so
that figures can be redrawn without a model."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from swarmctl.errors import DataError
from swarmctl.files import atomic_write

R = TypeVar("R")


@dataclass(frozen=True)
class ShuffleVarianceResult:
    """Per task: Hungarian loss over many random entity orders. Arrays have one entry per task."""

    label: str  # e.g. "lstm (128-3)"
    task_index: np.ndarray  # index in the validation split
    sizes: np.ndarray  # N of each task
    mean: np.ndarray  # mean loss over the shuffles
    std: np.ndarray  # standard deviation over the shuffles (ddof 0)
    n_shuffles: int

    @property
    def rel_std(self) -> np.ndarray:
        return self.std / self.mean


@dataclass(frozen=True)
class EntropyMapResult:
    """A task, the model's assignment, and the class probabilities of an extra point x* on a grid."""

    label: str
    task_index: int
    points: np.ndarray  # (N, 2)
    labels: np.ndarray  # (N,) true cluster
    means: np.ndarray  # (K, 2) generating means
    covs: np.ndarray  # (K, 2, 2) generating covariances
    assignment: np.ndarray  # (N,) arg-max class of each point in the original set
    grid_x: np.ndarray  # (G,)
    grid_y: np.ndarray  # (G,)
    probs: np.ndarray  # (G, G, C) class probabilities of x* at (grid_y[i], grid_x[j])
    seconds: float = 0.0
    method: str = "exact"  # "exact" (x* joins the set) or "probe" (swarmctl.studies.probe)

    @property
    def entropy(self) -> np.ndarray:
        """(G, G) entropy in nats of x*'s class distribution."""
        p = np.clip(self.probs, 1e-30, 1.0)
        return -(self.probs * np.log(p)).sum(-1)


def save_result(result: Any, path: Path) -> Path:
    """Write a result dataclass to ``path`` (.npz): arrays as arrays, the rest as JSON metadata."""
    arrays, meta = {}, {"type": type(result).__name__}
    for f in fields(result):
        value = getattr(result, f.name)
        if isinstance(value, np.ndarray):
            arrays[f.name] = value
        else:
            meta[f.name] = value
    arrays["__meta__"] = np.array(json.dumps(meta))
    path = Path(path).with_suffix(".npz")

    def write(tmp: str) -> None:
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        Path(tmp).write_bytes(buf.getvalue())

    atomic_write(path, write)
    return path


def load_result(cls: type[R], path: Path) -> R:
    """Read a result saved by :func:`save_result`; a file of another study is an error."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no saved result; run the study without --replot first")
    damaged = DataError(f"{path} is not a readable swarmctl study result (empty, cut short or damaged); run the "
                        "study again without --replot")
    try:
        with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as data:  # no file left open on errors
            meta = json.loads(str(data["__meta__"]))
            arrays = {k: data[k] for k in data.files if k != "__meta__"}
        kind = meta.pop("type")
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, AttributeError, TypeError,
            zlib.error):
        raise damaged from None
    if kind != cls.__name__:
        raise DataError(f"{path} holds another study's result, not a {cls.__name__}")
    try:
        return cls(**arrays, **meta)
    except TypeError:  # fields missing or unknown
        raise damaged from None


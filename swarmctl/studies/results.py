"""Result dataclasses of the studies: numpy arrays only (no torch), saved to and loaded from NPZ so
that figures can be redrawn without a model."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from swarmctl.errors import DataError
from swarmctl.files import atomic_write, read_bytes

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
    atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays))
    return path


def load_result(cls: type[R], path: Path) -> R:
    """Read a result saved by :func:`save_result`; a file of another study is an error."""
    path = Path(path)
    damaged = DataError(f"{path} is not a readable swarmctl study result (empty, cut short or damaged); run the "
                        "study again without `replot`")
    try:  # read_bytes refuses a FIFO or folder in its place, never waits on it
        with np.load(io.BytesIO(read_bytes(path)), allow_pickle=False) as data:  # no file left open on errors
            meta = json.loads(str(data["__meta__"]))
            arrays = {k: data[k] for k in data.files if k != "__meta__"}
        kind = meta.pop("type")
    except (FileNotFoundError, NotADirectoryError):
        raise DataError(f"{path}: no saved result; run the study without `replot` first") from None
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile, AttributeError, TypeError,
            zlib.error):
        raise damaged from None
    if kind != cls.__name__:
        raise DataError(f"{path} holds another study's result, not a {cls.__name__}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    required = {name for name, f in known.items() if f.default is MISSING}
    if not required <= set(arrays) | set(meta) or not set(arrays) | set(meta) <= set(known) or set(arrays) & set(meta):
        raise damaged
    meta = {**{name: f.default for name, f in known.items() if name not in arrays}, **meta}
    problem = _SCHEMAS[cls.__name__](arrays, meta)
    if problem:
        raise DataError(f"{path} is not a valid {cls.__name__} ({problem}); run the study again without `replot`")
    return cls(**arrays, **meta)


# ---- the schema of each result, checked before anything is drawn ---------------------------------------

def _array(arrays: dict[str, np.ndarray], name: str, ndim: int, kind: str, finite: bool = True) -> str | None:
    """A problem of ``arrays[name]`` (wrong rank, dtype kind "f"/"i" or non-finite values), or None."""
    a = arrays[name]
    if a.ndim != ndim:
        return f"{name} has {a.ndim} dimension(s), not {ndim}"
    ok = a.dtype.kind in "iu" if kind == "i" else a.dtype.kind in "iuf"
    if not ok:
        return f"{name} holds {a.dtype} values, not {'integers' if kind == 'i' else 'numbers'}"
    if 0 in a.shape:
        return f"{name} is empty"
    if finite and kind == "f" and not np.isfinite(a).all():
        return f"{name} holds NaN or infinite values"
    return None


def _number(meta: dict[str, Any], name: str, integer: bool = False, low: float = 0.0) -> str | None:
    v = meta[name]
    if isinstance(v, bool) or not isinstance(v, int if integer else int | float) or not np.isfinite(v) or v < low:
        return f"{name} is {v!r}, not {'an integer' if integer else 'a number'} >= {low:g}"
    return None


def _shuffle_problem(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str | None:
    for name, kind in (("task_index", "i"), ("sizes", "i"), ("mean", "f"), ("std", "f")):
        if problem := _array(arrays, name, 1, kind):
            return problem
    if len({len(arrays[k]) for k in ("task_index", "sizes", "mean", "std")}) != 1:
        return "its per-task arrays differ in length"
    if (arrays["mean"] <= 0).any() or (arrays["std"] < 0).any():
        return "a mean loss is not positive or a standard deviation is negative"
    if not isinstance(meta["label"], str):
        return "its label is not text"
    return _number(meta, "n_shuffles", integer=True, low=1)


def _entropy_problem(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str | None:
    shapes = {"points": (2, "f"), "labels": (1, "i"), "means": (2, "f"), "covs": (3, "f"), "assignment": (1, "i"),
              "grid_x": (1, "f"), "grid_y": (1, "f"), "probs": (3, "f")}
    for name, (ndim, kind) in shapes.items():
        if problem := _array(arrays, name, ndim, kind):
            return problem
    n, k, g, c = len(arrays["points"]), len(arrays["means"]), len(arrays["grid_x"]), arrays["probs"].shape[-1]
    expected = {"points": (n, 2), "labels": (n,), "assignment": (n,), "means": (k, 2), "covs": (k, 2, 2),
                "grid_y": (g,), "probs": (g, g, c)}
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            return f"{name} has shape {arrays[name].shape}, not {shape}"
    for name in ("labels", "assignment"):
        if (arrays[name] < 0).any() or (arrays[name] >= 10).any():
            return f"{name} holds a class outside 0..9"
    for name in ("grid_x", "grid_y"):
        if g < 2 or (np.diff(arrays[name]) <= 0).any():
            return f"{name} is not an increasing grid of at least 2 locations"
    if (arrays["probs"] < 0).any() or (arrays["probs"] > 1).any():
        return "probs holds values outside 0..1"
    if c > 10:
        return f"probs has {c} classes, more than 10"
    eig = np.linalg.eigvalsh(arrays["covs"].astype(np.float64))
    if (eig <= 0).any():
        return "covs holds a matrix that is not positive definite"
    if not isinstance(meta["label"], str) or meta["method"] not in ("exact", "probe"):
        return "its label is not text or its method is not exact or probe"
    return _number(meta, "task_index", integer=True) or _number(meta, "seconds")


_SCHEMAS = {"ShuffleVarianceResult": _shuffle_problem, "EntropyMapResult": _entropy_problem}


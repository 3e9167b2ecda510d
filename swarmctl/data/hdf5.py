"""The HDF5 schema of swarmctl datasets: ragged splits, generating parameters, and a checksum that
is verified on every open.

Layout (schema version 2)::

    /            attrs: schema_version, kind ("clustering" or "mog"), generator (JSON), seed,
                 swarmctl_version, checksum, splits
    /<split>/    points (total, 2) float32, labels (total,) int64, offsets (n+1,) int64,
                 n_clusters (n,) int64, means (n, 10, 2) float64, covs (n, 10, 2, 2) float64,
                 weights (n, 10) float64
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import h5py
import numpy as np

from swarmctl import __version__
from swarmctl.config import host_memory
from swarmctl.data.clustering_generator import (
    MAX_CLUSTERS,
    MAX_SET_SIZE,
    ClusteringParams,
    ClusteringTasks,
    generate_clustering,
)
from swarmctl.data.mog import MogParams, generate_mog_tasks
from swarmctl.errors import DataError, command_line
from swarmctl.files import atomic_write, check_regular_file

REGENERATE = command_line("gen-data", force=True)  # the fix of a damaged or outdated dataset file

SCHEMA_VERSION = 2
ARRAYS = ("points", "labels", "offsets", "n_clusters", "means", "covs", "weights")
DTYPES = {"points": np.float32, "labels": np.int64, "offsets": np.int64, "n_clusters": np.int64,
          "means": np.float64, "covs": np.float64, "weights": np.float64}
SHAPES = {"points": (2,), "labels": (), "offsets": (), "n_clusters": (), "means": (MAX_CLUSTERS, 2),
          "covs": (MAX_CLUSTERS, 2, 2), "weights": (MAX_CLUSTERS,)}  # each array's shape after its first axis
KINDS_OF = {key: "iu" if np.dtype(dt).kind == "i" else "fiu" for key, dt in DTYPES.items()}  # numpy dtype kinds read
KINDS = ("clustering", "mog")


def content_checksum(splits: dict[str, ClusteringTasks]) -> str:
    """SHA-256 over every array of every split, in a fixed order, as little-endian bytes."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        for key in ARRAYS:
            arr = np.ascontiguousarray(getattr(splits[name], key), dtype=np.dtype(DTYPES[key]).newbyteorder("<"))
            digest.update(f"{name}/{key}{arr.shape}".encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()


def ensure_writable(path: Path, force: bool) -> None:
    if Path(path).exists() and not force:
        raise DataError(f"{path} exists; pass `force` to overwrite it or `out` to write elsewhere")


def write_dataset(
    path: Path, splits: dict[str, ClusteringTasks], *, kind: str, seed: int, generator: dict[str, Any],
    force: bool = False,
) -> dict[str, Any]:
    """Write ``splits`` to ``path`` atomically (an existing file only with ``force``); returns the root
    attributes, read back from the bytes written (inside ``staged_outputs`` the file appears only at the end).
    """
    path = Path(path)
    ensure_writable(path, force)

    def write(fh: BinaryIO) -> None:
        with h5py.File(fh, "w") as f:
            f.attrs["schema_version"] = SCHEMA_VERSION
            f.attrs["kind"] = kind
            f.attrs["generator"] = json.dumps(generator, sort_keys=True)
            f.attrs["seed"] = seed
            f.attrs["swarmctl_version"] = __version__
            f.attrs["splits"] = json.dumps(sorted(splits))
            f.attrs["checksum"] = content_checksum(splits)
            for name, tasks in splits.items():
                g = f.create_group(name)
                for key in ARRAYS:
                    g.create_dataset(key, data=np.asarray(getattr(tasks, key), dtype=DTYPES[key]))
        with h5py.File(fh, "r") as f:
            info.update(_info(f, path))

    info: dict[str, Any] = {}
    atomic_write(path, write, replace=force)
    return info


def _open(path: Path) -> h5py.File:
    path = Path(path)
    check_regular_file(path)  # a folder or a FIFO is named for what it is (and never waited on)
    if not path.is_file():
        raise DataError(f"{path}: no such dataset file; create one with {command_line('gen-data', out=path)}")
    try:
        return h5py.File(path, "r")
    except OSError:
        raise DataError(f"{path} is not an HDF5 file or is truncated; create a dataset with `swarmctl gen-data`") \
            from None


# what h5py raises for a file whose bytes were damaged after it was opened
_H5_ERRORS = (OSError, KeyError, ValueError, RuntimeError, TypeError, IndexError)


def _scalar(value: Any) -> Any:
    """An attribute as a Python value, whichever way a tool stored it (a one-element array, a numpy scalar)."""
    return value.item() if isinstance(value, np.ndarray | np.generic) and value.size == 1 else value


def _text(value: Any) -> str | None:
    """An attribute as text, whichever way a tool stored it (str, bytes, one-element array); else None."""
    value = _scalar(value)
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _integer(value: Any) -> int | None:
    value = _scalar(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _info(f: h5py.File, path: Path) -> dict[str, Any]:
    attrs = f.attrs
    if "schema_version" not in attrs or "checksum" not in attrs:
        raise DataError(f"{path} is HDF5 but not a swarmctl dataset; create one with `swarmctl gen-data`")
    version = _integer(attrs["schema_version"])
    if version is None:
        raise DataError(f"{path} has a malformed schema_version attribute ({_short(attrs['schema_version'])}); "
                        f"regenerate it with {REGENERATE}")
    if version != SCHEMA_VERSION:
        raise DataError(f"{path} has schema version {version}, this swarmctl reads version {SCHEMA_VERSION}; "
                        "regenerate it with `swarmctl gen-data`")

    def bad(name: str, what: str) -> DataError:
        return DataError(f"{path}: the {name} attribute is {what}; the file was damaged or written by another tool, "
                         f"regenerate it with {REGENERATE}")

    values: dict[str, Any] = {}
    for name in ("kind", "generator", "swarmctl_version", "splits", "checksum"):
        if name not in attrs:
            raise bad(name, "missing")
        values[name] = _text(attrs[name])
        if values[name] is None:
            raise bad(name, "not text")
    if values["kind"] not in KINDS:
        raise bad("kind", f"{_short(values['kind'])}, not one of {', '.join(KINDS)}")
    for name in ("generator", "splits"):
        try:
            values[name] = json.loads(values[name])
        except ValueError:
            raise bad(name, "not valid JSON") from None
    if not isinstance(values["generator"], dict):
        raise bad("generator", "not a JSON object")
    splits = values["splits"]
    if (not isinstance(splits, list) or not splits or not all(isinstance(s, str) and s for s in splits)
            or len(set(splits)) != len(splits)):
        raise bad("splits", "not a JSON list of distinct split names")
    if not re.fullmatch(r"[0-9a-f]{64}", values["checksum"]):
        raise bad("checksum", "not a SHA-256 hex digest")
    seed = _integer(attrs["seed"]) if "seed" in attrs else None
    if seed is None:
        raise bad("seed", "missing or not an integer")
    return {"schema_version": version, **values, "seed": seed}


def _check_layout(f: h5py.File, path: Path, splits: list[str]) -> None:
    """Every split is a group holding the seven arrays with the right ranks, trailing shapes, kinds and
    consistent lengths, and all of them fit in memory; read from the metadata alone, nothing allocated."""

    def broken(problem: str) -> DataError:
        return DataError(f"{path}{problem}; regenerate the file with {REGENERATE}")

    total_bytes = 0
    for name in splits:
        group = f.get(name)
        if not isinstance(group, h5py.Group):
            raise broken(f" lacks the split {name!r} its splits attribute lists; the file is incomplete")
        shapes = {}
        for key in ARRAYS:
            ds = group.get(key)
            if not isinstance(ds, h5py.Dataset):
                raise broken(f" lacks {name}/{key}; the file is incomplete")
            want = SHAPES[key]
            if len(ds.shape) != len(want) + 1 or tuple(ds.shape[1:]) != want:
                raise broken(f": {name}/{key} has shape {ds.shape}, expected ({', '.join(['n', *map(str, want)])})")
            if ds.dtype.kind not in KINDS_OF[key]:
                raise broken(f": {name}/{key} has dtype {ds.dtype}, expected {np.dtype(DTYPES[key]).name}")
            shapes[key] = ds.shape
            total_bytes += int(np.prod(ds.shape, dtype=np.float64)) * 8
        n = shapes["offsets"][0] - 1
        if n < 1:
            raise broken(f": split {name!r} holds no tasks")
        for key in ("n_clusters", "means", "covs", "weights"):
            if shapes[key][0] != n:
                raise broken(f": {name}/{key} describes {shapes[key][0]} tasks, offsets {n}")
        if shapes["points"][0] != shapes["labels"][0]:
            raise broken(f": split {name!r} has {shapes['points'][0]} points but {shapes['labels'][0]} labels")
    limit = host_memory() // 2
    if total_bytes > limit:
        raise DataError(f"{path} needs {total_bytes / 2**30:.1f} GiB to read, more than half of this machine's "
                        f"memory ({limit / 2**30:.1f} GiB); use a smaller dataset")


def read_dataset(path: Path) -> tuple[dict[str, ClusteringTasks], dict[str, Any]]:
    """All splits and the root attributes; verifies the schema, the layout, the checksum and then the
    content in full (see :func:`_check_tasks`)."""
    with _open(path) as f:
        try:
            info = _info(f, path)
            _check_layout(f, path, info["splits"])
            splits = {}
            for name in info["splits"]:
                with np.errstate(all="ignore"):  # values a cast turns to inf are refused below, without a warning
                    arrays = {key: np.asarray(f[name][key][()], dtype=DTYPES[key]) for key in ARRAYS}
                splits[name] = ClusteringTasks(**arrays)
        except _H5_ERRORS:
            raise DataError(f"{path} is damaged (its HDF5 structure cannot be read); regenerate it with "
                            f"{REGENERATE}") from None
    if content_checksum(splits) != info["checksum"]:
        raise DataError(f"{path}: content checksum mismatch (the file was modified or damaged); regenerate it "
                        f"with {REGENERATE}")
    for name, tasks in splits.items():
        _check_tasks(tasks, f"{path}, split {name!r},", _cluster_range(info))
    return splits, info


def _cluster_range(info: dict[str, Any]) -> tuple[int, int]:
    """The numbers of clusters the file's generator draws (1..10 when it does not say)."""
    gen = info["generator"]
    lo, hi = gen.get("k_min", gen.get("n_clusters")), gen.get("k_max", gen.get("n_clusters"))
    if isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi <= MAX_CLUSTERS:
        return lo, hi
    return 1, MAX_CLUSTERS


def read_splits(path: Path, *splits: str, kind: str | None = None,
                fix: str = "") -> tuple[dict[str, ClusteringTasks], dict[str, Any]]:
    """:func:`read_dataset`, refusing a file of another ``kind`` of tasks (``fix`` says what to use) or one
    without each of ``splits``."""
    data, info = read_dataset(path)
    if kind is not None and info["kind"] != kind:
        raise DataError(f"{path} holds {info['kind']!r} tasks, not {kind} tasks{fix}")
    for split in splits:
        if split not in data:
            raise DataError(f"{path} has no split {split!r}; it has {', '.join(repr(s) for s in data)}")
    return data, info


def read_split(path: Path, split: str) -> tuple[ClusteringTasks, dict[str, Any]]:
    """One split (checksum of the whole file verified)."""
    splits, info = read_splits(path, split)
    return splits[split], info


def _check_tasks(tasks: ClusteringTasks, where: str, clusters: tuple[int, int] = (1, MAX_CLUSTERS)) -> None:
    """Reject content no model can train on, with one line naming the first bad task."""
    fix = f"regenerate the dataset with {REGENERATE}"

    def refuse(task: int, problem: str) -> NoReturn:
        raise DataError(f"{where} task {task} {problem}; {fix}")

    n = len(tasks)
    if n < 1:
        raise DataError(f"{where} holds no tasks")
    offsets, sizes = tasks.offsets, tasks.sizes
    if offsets[0] != 0 or offsets[-1] != len(tasks.points) or len(tasks.labels) != len(tasks.points):
        raise DataError(f"{where} offsets run from {offsets[0]} to {offsets[-1]} but the split holds "
                        f"{len(tasks.points)} points and {len(tasks.labels)} labels; {fix}")
    if (sizes < 2).any():
        bad = int(np.flatnonzero(sizes < 2)[0])
        refuse(bad, f"has {sizes[bad]} entities; every set needs at least 2")
    if sizes.max() > MAX_SET_SIZE:
        bad = int(np.argmax(sizes))
        refuse(bad, f"has {sizes[bad]:,} entities, more than the {MAX_SET_SIZE:,} swarmctl accepts")
    if not np.isfinite(tasks.points).all():
        bad = int(np.searchsorted(offsets, np.flatnonzero(~np.isfinite(tasks.points).all(1))[0], "right") - 1)
        refuse(bad, "has NaN or infinite points")
    k = tasks.n_clusters
    lo, hi = clusters
    if ((k < lo) | (k > hi)).any():
        bad = int(np.flatnonzero((k < lo) | (k > hi))[0])
        refuse(bad, f"has {k[bad]} clusters, outside its generator's range {lo}..{hi}")
    task_k = np.repeat(k, sizes)
    out = (tasks.labels < 0) | (tasks.labels >= task_k)
    if out.any():
        first = int(np.flatnonzero(out)[0])
        bad = int(np.searchsorted(offsets, first, "right") - 1)
        refuse(bad, f"has label {tasks.labels[first]}, outside 0..{k[bad] - 1}")
    used = np.arange(MAX_CLUSTERS)[None, :] < k[:, None]  # (n, 10): the clusters each task draws
    for key, arr in (("means", tasks.means), ("covs", tasks.covs), ("weights", tasks.weights)):
        finite = np.isfinite(arr.reshape(n, -1)).all(1)
        if not finite.all():
            refuse(int(np.flatnonzero(~finite)[0]), f"has NaN or infinite {key}")
    c = tasks.covs
    a, b, b2, d = c[..., 0, 0], c[..., 0, 1], c[..., 1, 0], c[..., 1, 1]
    with np.errstate(all="ignore"):  # an overflow makes a check fail, silently; the message says which
        scale = np.maximum(np.abs(a) + np.abs(d), np.finfo(np.float64).tiny)
        pd = (a > 0) & (a * d - b * b2 > 0) & (np.abs(b - b2) <= 1e-9 * scale)
        w = np.where(used, tasks.weights, 0.0)
        sums_ok = (w >= 0).all(1) & (np.abs(w.sum(1) - 1.0) <= 1e-6)
    if (used & ~pd).any():
        refuse(int(np.flatnonzero((used & ~pd).any(1))[0]), "has a covariance that is not symmetric positive definite")
    if not sums_ok.all():
        refuse(int(np.flatnonzero(~sums_ok)[0]), "has mixture weights that are not a distribution")


def generate_dataset(
    path: Path, params: ClusteringParams, seed: int, force: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Generate clustering tasks and write them to ``path``: the first tasks form ``train``, the last
    ``params.n_val`` form ``val``. Returns the root attributes written."""
    path = Path(path)
    ensure_writable(path, force)  # checked before spending time on generation
    tasks = generate_clustering(params, seed, progress)
    n_train = params.n_tasks - params.n_val
    splits = {"train": tasks.select(slice(0, n_train)), "val": tasks.select(slice(n_train, None))}
    for name, split in splits.items():  # what the reader would refuse is never written
        try:
            _check_tasks(split, f"split {name!r}", (params.k_min, params.k_max))
        except DataError as exc:
            problem = str(exc).split(";")[0]
            raise DataError(f"the generated tasks fail the dataset checks ({problem}): the inverse-Wishart "
                              f"parameters (df {params.wishart_df:.10g}, scale {params.wishart_scale:.10g}) are too "
                              f"extreme; choose values nearer the defaults (df {ClusteringParams.wishart_df:g}, "
                              f"scale {ClusteringParams.wishart_scale:g})") from None
    return write_dataset(path, splits, kind="clustering", seed=seed,
                         generator={"name": "clustering", **asdict(params)}, force=force)


def generate_mog_dataset(path: Path, n_tasks: int, seed: int, force: bool = False) -> dict[str, Any]:
    """Write a fixed MoG test set (split ``test``) of ``n_tasks`` tasks, drawn 10 per batch."""
    path = Path(path)
    ensure_writable(path, force)
    n_batches = max(1, -(-n_tasks // 10))
    tasks = generate_mog_tasks(n_batches, 10, seed).select(slice(0, n_tasks))  # batches of 10: keep n_tasks
    return write_dataset(path, {"test": tasks}, kind="mog", seed=seed,
                         generator={"name": "mog4", "batches": n_batches, "batch_size": 10, "tasks": n_tasks,
                                    **asdict(MogParams())},
                         force=force)

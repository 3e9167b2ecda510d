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
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from swarmctl import __version__
from swarmctl.data.mog import MogParams, generate_mog_tasks
from swarmctl.data.tasks import MAX_CLUSTERS, ClusteringParams, ClusteringTasks, generate_clustering
from swarmctl.errors import DataError
from swarmctl.files import atomic_write

SCHEMA_VERSION = 2
ARRAYS = ("points", "labels", "offsets", "n_clusters", "means", "covs", "weights")
DTYPES = {"points": np.float32, "labels": np.int64, "offsets": np.int64, "n_clusters": np.int64,
          "means": np.float64, "covs": np.float64, "weights": np.float64}


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
    """Refuse to replace an existing dataset unless ``force``."""
    if Path(path).exists() and not force:
        raise DataError(f"{path} exists; pass --force to overwrite it or --out to write elsewhere")


def write_dataset(
    path: Path, splits: dict[str, ClusteringTasks], *, kind: str, seed: int, generator: dict[str, Any],
    force: bool = False,
) -> None:
    """Write ``splits`` to ``path`` through a temporary file in the same folder and an atomic rename.

    Refuses to replace an existing file unless ``force``.
    """
    path = Path(path)
    ensure_writable(path, force)

    def write(tmp: str) -> None:
        with h5py.File(tmp, "w") as f:
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

    atomic_write(path, write)


def _open(path: Path) -> h5py.File:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such dataset file; create one with `swarmctl gen-data --out {path}`")
    try:
        return h5py.File(path, "r")
    except OSError:
        raise DataError(f"{path} is not an HDF5 file; create a dataset with `swarmctl gen-data`") from None


def read_info(path: Path) -> dict[str, Any]:
    """The root attributes of a dataset (schema checked, content not read)."""
    with _open(path) as f:
        return _info(f, path)


def _info(f: h5py.File, path: Path) -> dict[str, Any]:
    version = f.attrs.get("schema_version")
    if version is None or "checksum" not in f.attrs:
        raise DataError(f"{path} is HDF5 but not a swarmctl dataset; create one with `swarmctl gen-data`")
    if int(version) != SCHEMA_VERSION:
        raise DataError(f"{path} has schema version {int(version)}, this swarmctl reads version {SCHEMA_VERSION}; "
                        "regenerate it with `swarmctl gen-data`")
    return {
        "schema_version": int(version),
        "kind": str(f.attrs["kind"]),
        "generator": json.loads(f.attrs["generator"]),
        "seed": int(f.attrs["seed"]),
        "swarmctl_version": str(f.attrs["swarmctl_version"]),
        "splits": json.loads(f.attrs["splits"]),
        "checksum": str(f.attrs["checksum"]),
    }


def read_dataset(path: Path) -> tuple[dict[str, ClusteringTasks], dict[str, Any]]:
    """All splits and the root attributes; verifies schema, checksum and the content's sanity."""
    with _open(path) as f:
        info = _info(f, path)
        try:
            splits = {
                name: ClusteringTasks(**{key: f[name][key][()] for key in ARRAYS}) for name in info["splits"]
            }
        except KeyError as exc:
            raise DataError(f"{path} lacks {exc.args[0]}; the file is incomplete, regenerate it") from None
    if content_checksum(splits) != info["checksum"]:
        raise DataError(f"{path}: content checksum mismatch (the file was modified or damaged); regenerate it "
                        "with `swarmctl gen-data --force`")
    for name, tasks in splits.items():
        check_tasks(tasks, f"{path} [{name}]")
    return splits, info


def read_split(path: Path, split: str) -> tuple[ClusteringTasks, dict[str, Any]]:
    """One split (checksum of the whole file verified)."""
    splits, info = read_dataset(path)
    if split not in splits:
        raise DataError(f"{path} has no split {split!r}; it has: {', '.join(splits)}")
    return splits[split], info


def check_tasks(tasks: ClusteringTasks, where: str) -> None:
    """Reject content no model can train on: non-finite points, sets of fewer than 2 entities, bad labels."""
    if len(tasks) == 0:
        raise DataError(f"{where} holds no tasks")
    if not np.isfinite(tasks.points).all():
        bad = int(np.searchsorted(tasks.offsets, np.flatnonzero(~np.isfinite(tasks.points).all(1))[0], "right") - 1)
        raise DataError(f"{where}: task {bad} has NaN or infinite points; regenerate the dataset")
    sizes = tasks.sizes
    if (sizes < 2).any():
        bad = int(np.flatnonzero(sizes < 2)[0])
        raise DataError(f"{where}: task {bad} has {sizes[bad]} entities; every set needs at least 2")
    if len(tasks.labels) and (tasks.labels.min() < 0 or tasks.labels.max() >= MAX_CLUSTERS):
        raise DataError(f"{where}: labels must lie in 0..9")


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
    write_dataset(path, splits, kind="clustering", seed=seed, generator={"name": "clustering", **asdict(params)},
                  force=force)
    return read_info(path)



def generate_mog_dataset(path: Path, n_tasks: int, seed: int, force: bool = False) -> dict[str, Any]:
    """Write a fixed MoG test set (split ``test``) of ``n_tasks`` tasks, drawn 10 per batch."""
    path = Path(path)
    ensure_writable(path, force)
    n_batches = max(1, -(-n_tasks // 10))
    tasks = generate_mog_tasks(n_batches, 10, seed)
    write_dataset(path, {"test": tasks}, kind="mog", seed=seed,
                  generator={"name": "mog4", "batches": n_batches, "batch_size": 10, **asdict(MogParams())},
                  force=force)
    return read_info(path)

"""Clustering a user's own point file with a trained model (`swarmctl cluster`): check every output path,
open the model, read and check the points, cluster them in one forward pass, write the CSV."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmctl.data.points import STDIN, PointSet, read_points, write_cluster_csv
from swarmctl.errors import ConfigError, DataError, ResourceError
from swarmctl.files import check_output_file
from swarmctl.runs import open_run
from swarmctl.tasks.point_clusters import PointClusters


@dataclass(frozen=True)
class ClusterResult:
    points: PointSet
    clusters: PointClusters
    out: Path  # the CSV written
    model: str  # e.g. "swarm (192-10-1)"
    checkpoint: Path
    shipped: bool
    seconds: float  # the forward pass and its summary, reading and writing excluded


def default_output(points: str) -> Path:
    """``DIR/NAME-clusters.csv`` beside the input; ``clusters.csv`` in the working folder for standard input."""
    if points == STDIN:
        return Path("clusters.csv")
    path = Path(points)
    return path.with_name(f"{path.stem}-clusters.csv")


def check_new_file(path: Path, force: bool, option: str, points: str) -> None:
    """Refuse, before any work, an output that would overwrite a file without ``force``, or the input."""
    check_output_file(path)
    if points != STDIN and Path(points).exists() and path.exists() and path.resolve() == Path(points).resolve():
        raise ResourceError(f"{option} {path} is the input file; choose another output path")
    if path.exists() and not force:
        raise ResourceError(f"{path} exists; pass --force to overwrite it or choose another {option}")


def cluster_file(points: str, run: str | Path | None, runs_dir: Path, *, key: str | None = None,
                 columns: tuple[str, ...] | None = None, out: Path | None = None, force: bool = False,
                 standardize: bool = True, per_coordinate: bool = False, chunk_size: int | None = None,
                 device: str = "auto",
                 also_writes: dict[str, Path] | None = None,
                 progress: Callable[[float], None] | None = None) -> ClusterResult:
    """Cluster the points of ``points`` (a file, or ``"-"`` for standard input) with the run ``run``
    (None: the shipped clustering model) and write the CSV ``out`` (default: :func:`default_output`).

    ``also_writes`` (option -> path) are files the caller writes afterwards (the figure): they are checked
    with ``out`` before anything is read, so a bad path fails with nothing written.
    """
    out = Path(out) if out is not None else default_output(points)
    outputs = {"--out": out, **(also_writes or {})}
    for option, path in outputs.items():
        check_new_file(path, force, option, points)
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        same = seen.setdefault(path.resolve(), option)
        if same != option:
            raise ConfigError(f"{same} and {option} name the same file {path}; give each its own path")
    opened = open_run(run, runs_dir, device, study="cluster", needs_data=False)  # refuses a run of another task
    dim_in = opened.model_cfg.dim_in
    pts = read_points(points, key, columns)
    D = pts.values.shape[1]
    if D != dim_in:
        pick = "" if D < dim_in else f"; pick {dim_in} with --columns (e.g. --columns {','.join(pts.names[:dim_in])})"
        raise DataError(f"{pts.source} has {D} column(s) ({', '.join(pts.names[:6])}{' ...' if D > 6 else ''}) but "
                        f"{opened.label} takes {dim_in} coordinates per point{pick}")
    start = time.perf_counter()
    clusters = opened.task.cluster_points(opened.model, pts.values, opened.device, standardize, chunk_size, progress,
                                          per_coordinate=per_coordinate)
    seconds = time.perf_counter() - start
    write_cluster_csv(out, pts, clusters.cluster, clusters.probability, clusters.entropy)
    return ClusterResult(pts, clusters, out, opened.label, opened.checkpoint, opened.shipped, seconds)

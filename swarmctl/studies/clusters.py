"""Clustering a user's own point file with a trained model (`swarmctl cluster`): check every output path,
open the model, read and check the points, cluster them in one forward pass; then write the CSV (and the
figure) all together, or nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from swarmctl.data.points import STDIN, PointSet, is_plain_name, read_points, write_cluster_csv
from swarmctl.errors import ConfigError, DataError, ResourceError
from swarmctl.files import check_output_file, staged_writes
from swarmctl.runs import open_run
from swarmctl.tasks.point_clusters import PointClusters


@dataclass(frozen=True)
class ClusterResult:
    points: PointSet
    clusters: PointClusters
    out: Path  # the CSV to write
    plot: Path | None  # the figure to draw, if any
    model: str  # e.g. "swarm (192-10-1)"
    checkpoint: Path
    shipped: bool
    seconds: float  # the forward pass and its summary, reading and writing excluded
    inputs: tuple[Path, ...]  # every file read: never written, with or without force
    force: bool  # an existing output may be replaced


def default_output(points: str) -> Path:
    """``DIR/NAME-clusters.csv`` beside the input; ``clusters.csv`` in the working folder for standard input."""
    if points == STDIN:
        return Path("clusters.csv")
    path = Path(points)
    return path.with_name(f"{path.stem}-clusters.csv")


def check_outputs(outputs: dict[str, Path], force: bool, inputs: tuple[Path, ...]) -> None:
    """Refuse, before any work, an output (option -> path) that may never be written (an input, a run's
    own file or lock, a shipped model, a link or special file: ``force`` changes nothing), two options
    naming one file, and an existing file without ``force``."""
    for path in outputs.values():
        check_output_file(path, inputs)
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        same = seen.setdefault(path.resolve(), option)
        if same != option:
            raise ConfigError(f"{same} and {option} name the same file {path}; give each its own path")
    for option, path in outputs.items():
        if path.exists() and not force:
            raise ResourceError(f"{path} exists; pass --force to overwrite it or choose another {option}")


def cluster_file(points: str, run: str | Path | None, runs_dir: Path, *, key: str | None = None,
                 columns: tuple[str, ...] | None = None, out: Path | None = None, plot: Path | None = None,
                 force: bool = False, standardize: bool = True, per_coordinate: bool = False,
                 chunk_size: int | None = None, device: str = "auto",
                 progress: Callable[[float], None] | None = None) -> ClusterResult:
    """Cluster the points of ``points`` (a file, or ``"-"`` for standard input) with the run ``run``
    (None: the shipped clustering model); nothing is written yet (see :func:`written`).

    The outputs, ``out`` (default: :func:`default_output`) and ``plot``, are checked before anything is
    read, and again once the checkpoint is known: a bad path fails with nothing written.
    """
    out = Path(out) if out is not None else default_output(points)
    outputs = {"--out": out, **({"--plot": Path(plot)} if plot is not None else {})}
    source = () if points == STDIN else (Path(points),)
    named = (Path(run),) if run is not None and Path(run).is_file() else ()  # a checkpoint named as a file
    check_outputs(outputs, force, (*source, *named))
    opened = open_run(run, runs_dir, device, study="cluster", needs_data=False)  # refuses a run of another task
    inputs = (*source, opened.checkpoint)
    check_outputs(outputs, force, inputs)
    dim_in = opened.model_cfg.dim_in
    pts = read_points(points, key, columns)
    D = pts.values.shape[1]
    if D != dim_in:
        raise DataError(f"{pts.source} has {D} column(s) ({', '.join(pts.names[:6])}{' ...' if D > 6 else ''}) but "
                        f"{opened.label} takes {dim_in} coordinates per point{_pick_hint(pts.names, dim_in)}")
    start = time.perf_counter()
    clusters = opened.task.cluster_points(opened.model, pts.values, opened.device, standardize, chunk_size, progress,
                                          per_coordinate=per_coordinate)
    seconds = time.perf_counter() - start
    return ClusterResult(pts, clusters, out, outputs.get("--plot"), opened.label, opened.checkpoint, opened.shipped,
                         seconds, inputs, force)


def _pick_hint(names: tuple[str, ...], dim_in: int) -> str:
    """How to pick ``dim_in`` columns with --columns, in a form --columns takes for these names: the first
    names when each names one column and reads as a name, else indices."""
    if len(names) <= dim_in:
        return ""
    first = names[:dim_in]
    indices = [str(k) for k in range(dim_in)]
    if any(k in names for k in indices):  # a name that reads as an index: say which is meant
        indices = [f"index:{k}" for k in indices]
    by_name = all(names.count(n) == 1 and is_plain_name(n) for n in first)
    example = ",".join(first if by_name else indices)
    return f"; pick {dim_in} with --columns (e.g. --columns {example})"


@contextmanager
def written(result: ClusterResult, save_plot: Callable[[ClusterResult, Path], Path] | None = None
            ) -> Iterator[tuple[Path, ...]]:
    """Write the CSV and, when ``result.plot`` is set, the figure (``save_plot(result, path)`` draws and
    saves it, returning the path written), all at once when the block ends without error, or none: what
    the caller prints inside the block comes first, so an output that cannot be printed leaves no file.
    Yields the paths. No input is written; no existing file is replaced without ``result.force``, even
    one that appears while this runs."""
    with staged_writes(result.inputs, replace=result.force):
        c = result.clusters
        write_cluster_csv(result.out, result.points, c.cluster, c.probability, c.entropy)
        paths = [result.out]
        if result.plot is not None:
            if save_plot is None:
                raise ValueError("a plot was asked for but no save_plot given")
            paths.append(save_plot(result, result.plot))
        yield tuple(paths)

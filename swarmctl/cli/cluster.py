"""`swarmctl cluster`: cluster a file of the user's own points with a trained model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    Device,
    RunsDir,
    argument,
    checked,
    console,
    flush_output,
    option,
    say,
    user_errors,
)
from swarmctl.cli._progress import DelayedBar
from swarmctl.data.points import parse_columns
from swarmctl.plots.clusters import plot_clusters
from swarmctl.plots.style import save_figure
from swarmctl.studies.clusters import ClusterResult, cluster_file, written
from swarmctl.tasks.point_clusters import CHUNK_SIZE


def _png(value: Path | None) -> Path | None:
    if value is not None and value.suffix.lower() != ".png":
        raise typer.BadParameter(f"the figure is a PNG file; give a path ending in .png, got {value}")
    return value


def _vector(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.6g}" for x in v) + "]"


@app.command("cluster")
def cluster_cmd(
    points: Annotated[str, argument(metavar="POINTS", help="Points, one per row: CSV or whitespace-separated "
                                                           "text (the first row is a header when none of its "
                                                           "fields is a number; # starts a comment), .npy, .npz or "
                                                           "HDF5; - reads standard input.")],
    run: Annotated[str | None, argument(metavar="RUN", help="Run name, run folder or checkpoint file [default: "
                                                            "the shipped SWARM clustering model].")] = None,
    key: Annotated[str | None, option(help=".npz: the array; HDF5: the dataset path [default: the only one].")]
    = None,
    columns: Annotated[str | None, option(help="Columns to cluster on: header names or 0-based indices, e.g. x,y "
                                               "or 0,2 (a plain integer is an index; name:X and index:N say "
                                               "which is meant) [default: all].",
                                          callback=checked(parse_columns))] = None,
    out: Annotated[Path | None, option(help="Output CSV [default: POINTS-clusters.csv beside the input; "
                                            "clusters.csv for standard input].")] = None,
    plot: Annotated[Path | None, option(help="Also draw the points coloured by cluster, alpha by confidence, "
                                             "to this PNG file.", callback=_png)] = None,
    force: Annotated[bool, option("--force", help="Overwrite the --out and --plot files if they exist (never a file "
                                                  "the command reads, a run's own files or a shipped model).")]
    = False,
    standardize: Annotated[bool, option("--standardize/--no-standardize",
                                        help="Map the points affinely to the scale the model was trained on "
                                             "first; the output stays in your units.")] = True,
    per_coordinate: Annotated[bool, option("--per-coordinate",
                                           help="Standardize every coordinate on its own (for coordinates in "
                                                "different units) instead of one scale for all, which keeps "
                                                "the clusters' shapes.")] = False,
    chunk_size: Annotated[int, option(min=1, help="Points per chunk when a SWARM model runs a large set "
                                                  "(memory, not the result).")] = CHUNK_SIZE,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
) -> None:
    """Cluster your own points with a trained model in one forward pass.

    Writes a CSV with your coordinates, each point's cluster (0 = the largest), the probability of that
    cluster and the entropy of its class distribution (nats), and prints the clusters found. A SWARM
    model runs a large set in chunks of points: a million points take about 2.4 GB.
    """
    with user_errors():
        with DelayedBar("clustering the points") as bar:
            res = cluster_file(points, run, runs_dir, key=key, columns=parse_columns(columns) if columns else None,
                               out=out, plot=plot, force=force, standardize=standardize,
                               per_coordinate=per_coordinate, chunk_size=chunk_size, device=device, progress=bar)
        with written(res, _save_plot) as paths:  # the files appear once all is printed, or not at all
            _print_summary(res, per_coordinate, paths)
            flush_output()


def _save_plot(res: ClusterResult, path: Path) -> Path:
    fig = plot_clusters(res.points.values, res.points.names, res.clusters.cluster, res.clusters.probability,
                        f"{res.model} on {Path(res.points.source).name}")
    return save_figure(fig, path)


def _print_summary(res: ClusterResult, per_coordinate: bool, paths: tuple[Path, ...]) -> None:
    c = res.clusters
    say(f"model: {'the shipped ' if res.shipped else ''}{res.model} from {res.checkpoint}")
    if c.transform is None:
        say("points used as given (--no-standardize)")
    else:
        scale = _vector(c.transform.scale) if per_coordinate else f"{c.transform.scale[0]:.6g}"
        say(f"standardized to the training scale: x' = (x - {_vector(c.transform.shift)}) * {scale}")
    table = Table(title=escape(f"{len(c.sizes)} clusters in {len(res.points):,} points of {res.points.source}"))
    for col in ("cluster", "points", "share", "mean confidence"):
        table.add_column(col, justify="right")
    for k, (size, conf) in enumerate(zip(c.sizes, c.mean_confidence, strict=True)):
        table.add_row(str(k), f"{size:,}", f"{size / len(res.points):.1%}", f"{conf:.3f}")
    console.print(table)
    chunks = ", in chunks" if c.chunked else ""
    say(f"clustered in {res.seconds:.1f} s{chunks} -> {', '.join(map(str, paths))}")

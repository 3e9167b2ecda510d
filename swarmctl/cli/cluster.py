"""`swarmctl cluster`: cluster a file of the user's own points with a trained model."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarmctl.catalog import catalog
from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    Device,
    RunsDir,
    argument,
    console,
    count,
    flush_output,
    option,
    say,
)
from swarmctl.cli._progress import DelayedBar
from swarmctl.cli._table import print_table
from swarmctl.errors import ConfigError, SwarmctlWarning, plural

if TYPE_CHECKING:
    from swarmctl.cluster import ClusterResult, EMResult


def _columns(value: str | None) -> tuple[str, ...] | None:
    """--columns parsed once, here: the command gets the tuple."""
    if value is None:
        return None
    from swarmctl.studies.clusters import parse_columns  # the library loads when the command runs, not for --help

    try:
        return parse_columns(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None


def _out(value: Path | None) -> Path | None:
    """--out checked in itself: ``-`` is standard output to a Unix user, where this command does not write
    (its summary goes there, and its outputs appear together or not at all)."""
    if value is not None and str(value) == "-":
        raise typer.BadParameter("cluster writes its CSV to a file, not to standard output; give a file path "
                                 "such as clusters.csv (and cat it to see it)")
    return value


def _vector(v) -> str:  # a NumPy vector
    return "[" + ", ".join(f"{x:.6g}" for x in v) + "]"


@app.command("cluster")
def cluster_cmd(
    points: Annotated[str, argument(metavar="POINTS", help="Points, one per row: CSV or whitespace-separated "
                                                           "text (the first row is a header when none of its "
                                                           "fields is a finite number; a line starting with # is "
                                                           "a comment), .npy, .npz or "
                                                           "HDF5; - reads standard input.")],
    run: Annotated[str | None, argument(metavar="RUN", help="Run name, run folder or checkpoint file [default: "
                                                            "the shipped SWARM clustering model].")] = None,
    key: Annotated[str | None, option(help=".npz: the array; HDF5: the dataset path [default: the only one].")]
    = None,
    columns: Annotated[str | None, option(help="Columns to cluster on: header names or 0-based indices, e.g. x,y "
                                               "or 0,2 (a plain integer is an index; name:X and index:N say "
                                               "which is meant) [default: all].",
                                          callback=_columns)] = None,
    out: Annotated[Path | None, option(help="Output CSV [default: RUN/cluster/POINTS-clusters.csv; "
                                            "runs/pretrained-NAME/cluster/ for a shipped model; clusters.csv "
                                            "there for standard input].", callback=_out)] = None,
    plot: Annotated[Path | None, option(help="Also draw the points coloured by cluster, alpha by confidence, "
                                             "to this PNG file.")] = None,
    force: Annotated[bool, option("--force", help="Overwrite the --out and --plot files if they exist (never a file "
                                                  "the command reads, a run's own files or a shipped model).")]
    = False,
    standardize: Annotated[bool, option("--standardize/--no-standardize",
                                        help="Map the points affinely to the scale the model was trained on "
                                             "first; the output stays in your units.")] = True,
    per_coordinate: Annotated[bool, option("--per-coordinate",
                                           help="Scale every coordinate to the training spread on its own (for "
                                                "coordinates in different units); this stretches the clusters' "
                                                "shapes. Without it one factor scales all coordinates, which "
                                                "keeps the shapes.")] = False,
    refine: Annotated[bool, option("--refine/--no-refine",
                                   help="Refine the model's clusters by EM (full-covariance Gaussians) started from "
                                        "its probabilities, the number of clusters settled by BIC against fresh "
                                        "fits at K-1..K+4 around the model's and around the K a scan of k-means "
                                        "partitions puts best, then its clusters split while the BIC falls "
                                        "(past the model's slots); on more than 1,000 points the model sees a "
                                        "sample of 1,000 and EM fits all.")] = True,
    clusters: Annotated[int | None, count(metavar="K", help="The number of clusters, if you know it: EM fits "
                                                             "exactly K from the model's answer (its K most "
                                                             "probable clusters, split or absorbed to make K) "
                                                             "instead of settling K by BIC. Needs --refine; at "
                                                             "most the number of distinct points.")] = None,
    skip_bad_rows: Annotated[bool, option("--skip-bad-rows",
                                          help="Leave out rows with an empty, non-numeric, NaN or missing value in "
                                               "the columns clustered (the count is printed) instead of refusing "
                                               "the file.")] = False,
    as_json: Annotated[bool, option("--json", help="Print the result as one JSON object (the clusters' sizes, "
                                                   "which start won, the warnings, the files written) instead of "
                                                   "the summary; the warnings still go to stderr.")] = False,
    chunk_size: Annotated[int, count(help="Points per chunk when a SWARM model runs a large set "
                                                  "(memory, not the result).")] = catalog()["cluster_chunk_size"],
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
) -> None:
    """Cluster your own points with a trained model in one forward pass, refined by EM.

    Writes a CSV with every column of your file, each point's cluster (0 = the largest), the probability
    of that cluster and the entropy of its class distribution (nats), and prints the clusters found. With
    --no-refine a SWARM model runs a large set in chunks of points: a million points take about 2.4 GB.

    Two clustering models ship (of the three shipped models). The paper's (the default of eval and
    plot-entropy) was trained on sets of 100..1,000 points with 3..10 round-ish Gaussian clusters of equal
    weight (means N(0, I), inverse-Wishart covariances of scale 0.05 I: the SWARM paper's generator) and
    returns at most 10 clusters. The default here was fine-tuned from it, on a 2-core CPU, on a broad prior
    (1..16 clusters of unequal weight, 50..800 points, elongated and rotated, tight to overlapping) and on
    the paper's tasks, and returns at most 16 clusters. Sets of few, broad or overlapping clusters look to
    both like many small ones: --refine (the default) starts EM from the model's answer and settles the
    number of clusters by BIC near it; --clusters K gives the number instead, and EM fits exactly K from
    the model's answer. Refined, the number of clusters is not bounded by the model's slots: the search
    goes on while the BIC falls. A warning on stderr says when a result should not be trusted as it is: a
    limit reached (the set's size, or without --refine the model's cluster slots), many unsure points,
    clusters that look like one or hold a few stray points, a set unlike the training sets, points that are
    not a mixture of Gaussians (a ring, a curve, a core in a halo), weak evidence for the number found. The
    summary, the CSV's first line, the figure's title and --json say in the same words which start won.
    """
    from swarmctl.cluster import cluster_file  # the library loads when the command runs, not for --help

    def report(res: ClusterResult) -> None:  # inside the library's writes: no file appears unless printed
        if as_json:  # whole, never wrapped: a terminal's wrap would break its strings
            console.print(_json(res), markup=False, highlight=False, soft_wrap=True, emoji=False)
        else:
            _print_summary(res, per_coordinate)
        flush_output()

    with DelayedBar("clustering the points") as bar:
        res = cluster_file(points, run, runs_dir, key=key, columns=columns,  # type: ignore[arg-type]
                           out=out, plot=plot, force=force, standardize=standardize,
                           per_coordinate=per_coordinate, refine=refine, clusters=clusters,
                           skip_bad_rows=skip_bad_rows,
                           chunk_size=chunk_size, device=device, progress=bar, save_plot=_save_plot,
                           report=report)
    for line in res.warnings:
        warnings.warn(line, SwarmctlWarning, stacklevel=1)


def _save_plot(res: ClusterResult, path: Path) -> Path:
    from swarmctl.plots.clusters import plot_clusters
    from swarmctl.plots.style import save_figure

    fig = plot_clusters(res.points.values, res.points.shown_names, res.clusters.cluster, res.clusters.probability,
                        f"{res.made_by} on {Path(res.points.source).name}")
    return save_figure(fig, path)


def _print_summary(res: ClusterResult, per_coordinate: bool) -> None:
    c = res.clusters
    say(f"model: {'the shipped ' if res.shipped else ''}{res.model}, {c.slots} cluster slots, from {res.checkpoint}")
    if res.chosen:
        say(f"chosen as no run was named: {res.chosen}")
    if res.points.skipped:
        say(f"skipped {plural(res.points.skipped, 'row')} with an empty, non-numeric or missing value "
            "(--skip-bad-rows)")
    if c.transform is None:
        say("points used as given (--no-standardize)")
    else:
        scale = _vector(c.transform.scale) if per_coordinate else f"{c.transform.scale[0]:.6g}"
        offset = res.points.offset or (0,) * len(c.transform.shift)  # columns read less an integer, exactly
        shift = [float(s) + o for s, o in zip(c.transform.shift, offset, strict=True)]
        say(f"standardized to the training scale: x' = (x - {_vector(shift)}) * {scale}")
    k = len(c.sizes)
    title = f"{plural(k, 'cluster')} in {len(res.points):,} points of {res.points.source}"
    columns = ("cluster", "points", "share", "mean confidence")
    print_table(columns, [(str(k), f"{size:,}", f"{size / len(res.points):.1%}", f"{conf:.3f}")
                          for k, (size, conf) in enumerate(zip(c.sizes, c.mean_confidence, strict=True))],
                title=title, right=columns)
    if res.sorted_for_model:
        say("the model's answer depends on the order of the points: it read them sorted by coordinate, so the "
            "clusters do not depend on the order of the rows")
    if res.fit is not None:
        say(_refinement_line(res, res.fit, len(c.sizes)))
    chunks = ", in chunks" if c.chunked else ""
    say(f"clustered in {_seconds(res.seconds)}{chunks} (the clustering pass: reading, warm-up and writing excluded) "
        f"-> {', '.join(map(str, res.written))}")


def _refinement_line(res: ClusterResult, fit: EMResult, found: int) -> str:
    """Which start won and how K was settled (:attr:`ClusterResult.made_by`, the words the CSV's comment, the
    figure's title and `--json` use too), then what the model proposed and what the search tried."""
    model = f"the model proposed {plural(res.model_clusters, 'cluster')}"
    if res.model_points < len(res.points):
        model += f" on a sample of {res.model_points:,} points"
    changes = [f"{plural(fit.merged, 'duplicate pair')} merged"] if fit.merged else []
    if fit.dropped:
        changes.append(f"{plural(fit.dropped, 'component')} under {res.smallest_component:g} points dropped")
    details = [model + "".join(f", {c}" for c in changes)]
    if fit.searched:
        details.append(f"EM fitted {_ranges(fit.searched)} clusters (around the model's and the k-means scan's "
                       f"{fit.scanned})")
    if fit.split_from:
        details.append(f"{plural(fit.split_from, 'cluster')} split to {found} while the BIC fell")
    return f"refined: {res.made_by} ({'; '.join(details)})"


def _ranges(ks: tuple[int, ...]) -> str:
    """1, 2, 3, 7, 8 -> "1..3, 7..8"."""
    runs: list[list[int]] = []
    for k in ks:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _json(res: ClusterResult) -> str:
    """The result as one JSON object (`--json`): the wording of the summary line in ``made_by`` and ``start``."""
    c = res.clusters
    fit = res.fit
    return json.dumps(ensure_ascii=False, indent=2, obj={
        "points": len(res.points), "skipped_rows": res.points.skipped, "source": res.points.source,
        "model": res.model, "checkpoint": str(res.checkpoint),
        "clusters": len(c.sizes), "sizes": c.sizes.tolist(),
        "mean_confidence": [round(float(v), 6) for v in c.mean_confidence],
        "made_by": res.made_by, "start": res.start or None, "refined": res.refined,
        "given_clusters": res.given_clusters, "model_clusters": res.model_clusters,
        "searched": list(fit.searched) if fit is not None else [],
        "warnings": list(res.warnings), "written": [str(p) for p in res.written],
        "seconds": round(res.seconds, 6)})


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"

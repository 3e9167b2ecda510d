"""`swarmctl shuffle-variance`: loss spread under random reorderings of the input set."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from swarmctl.cli import _options
from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    Device,
    RunsDir,
    argument,
    count,
    flush_output,
    option,
    say,
    seed_option,
)


@app.command("shuffle-variance")
def shuffle_variance_cmd(
    runs: Annotated[list[str] | None, argument(metavar="RUN", help="One or more runs (names or folders) "
                                                                  "[default: the shipped SWARM clustering model].")]
    = None,
    data: Annotated[Path | None, option(help="HDF5 dataset every run is measured on [default: each run's own].")]
    = None,
    tasks: Annotated[int, count(help="Validation tasks, spread evenly over the set size.")] = 100,
    shuffles: Annotated[int, count(help="Random orderings per task (a spread needs two; the paper's figure: 1000, "
                                        "five times the default's time).", low=2)]
    = 200,
    seed: Annotated[int, seed_option(help="Seed of the orderings.")] = 0,
    out: Annotated[Path | None, option(help="Output folder [default: RUN/shuffle-variance for one run, "
                                                  "RUNS_DIR/shuffle-variance for several; "
                                                  "runs/pretrained-NAME/shuffle-variance for the shipped model].")]
    = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    replot: Annotated[bool, option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
    force: _options.Force = False,
) -> None:
    """Measure how much each run's loss moves when its input sets are reordered.

    Per task: the relative standard deviation (std / mean) of the Hungarian loss over many random
    orderings. Equivariant models give float-rounding values; the unsorted BiLSTM does not.

    Each task's set runs once per ordering, so the time grows with --tasks x --shuffles, the set sizes and
    the model: the defaults take under a minute on a laptop CPU for a small model (SWARM 64-10-1 on sets of
    up to 300 points); a larger model or larger sets take longer in proportion. A bar shows the time left.
    """
    from swarmctl.cli._progress import DataGenerationProgress, StepBar
    from swarmctl.plots.shuffle import plot_shuffle_variance
    from swarmctl.plots.style import save_figure
    from swarmctl.studies.shuffle_variance import shuffle_variance

    with shuffle_variance(runs, runs_dir, out, data, tasks, shuffles, seed, device, replot, force,
                          progress=StepBar, data_progress=DataGenerationProgress(),
                          announce=say) as study:  # every file (results, figure, summary), or none
        fig_path = save_figure(plot_shuffle_variance(study.results), study.figure)
        for label, s in study.summary.items():
            say(f"{label}: relative std median {s['median_rel_std']:.3g}, max {s['max_rel_std']:.3g} "
                f"over {s['tasks']} tasks x {s['shuffles']} orderings")
        say(f"-> {fig_path}, {study.summary_path}")
        flush_output()  # the files appear once this is printed, or not at all


"""`swarmctl train`: any registered model on its task, time-budgeted, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from swarmctl.catalog import catalog, models, per_task
from swarmctl.catalog import tasks as catalog_tasks
from swarmctl.cli import continue_with
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, RunsDir, argument, number, option, say, stop_if_interrupted
from swarmctl.config import RESUMABLE, TRAIN_OPTIONS, ModelConfig
from swarmctl.errors import either

_TASKS = catalog_tasks()
_NAMED_DATA = [t for t in _TASKS if t["datasets"]]  # tasks whose data is a named dataset in a folder
_DATA_HELP = "; ".join(f"{t['name']}: {t['train_data_help']}" for t in _TASKS)
_DATASET_HELP = "; ".join(f"{t['name']} models: {', '.join(t['datasets'])} [default: {t['default_dataset']}]"
                          for t in _NAMED_DATA) or "not used by any task"
_DATA_DIR_HELP = "; ".join(f"{t['name']} models: the folder holding the files [default: {t['default_data']}]"
                           for t in _NAMED_DATA) or "not used by any task"


_RESUMABLE_FLAGS = either(("--" + n.replace("_", "-") for n in RESUMABLE), "and")  # what a resume may change


_HYPER = {h["option"]: h for h in catalog()["hyperparameters"]}  # the models' hyper-parameter table
_ROWS = {row.field: row for row in TRAIN_OPTIONS}  # TrainConfig's user-set fields
_TYPES = {"int": int, "float": float, "str": str}


class _TaskDefaults(dict):
    """``{FIELD}`` in a train option's help: that field's default per task."""

    def __missing__(self, key: str) -> str:
        return per_task("defaults." + key)


def _typed(kind: str, help: str) -> Any:
    """An option of the type a table names: numbers parsed by :func:`number` (their bounds are the
    configs' checks, exit 2), text as it is."""
    return number(_TYPES[kind], help=help) if kind in ("int", "float") else option(help=help)


def _model(name: str) -> Any:
    """``--NAME``: the row of the models' hyper-parameter table with that option (None: the model's default)."""
    h = _HYPER[name]
    default = getattr(ModelConfig(), h["field"])
    shown = "the model's" if default is None else default
    return _typed(h["type"], f"{h['help']} [default: {shown}].")


def _train(field: str) -> Any:
    """``--FIELD``: the row of :data:`TRAIN_OPTIONS` of that field (None: the task's default, shown per task)."""
    row = _ROWS[field]
    text = f"{row.help.format_map(_TaskDefaults())} [default: {per_task('defaults.' + field)}]."
    return _typed(row.type.split("|")[0].strip(), text)


@app.command("train")
def train_cmd(
    ctx: typer.Context,
    model: Annotated[str, argument(help=f"Registered model: {', '.join(models())}.")],
    hidden: Annotated[int | None, _model("hidden")] = None,
    iters: Annotated[int | None, _model("iters")] = None,
    layers: Annotated[int | None, _model("layers")] = None,
    inducing: Annotated[int | None, _model("inducing")] = None,
    heads: Annotated[int | None, _model("heads")] = None,
    pooling: Annotated[str | None, _model("pooling")] = None,
    dropout: Annotated[float | None, _model("dropout")] = None,
    lr: Annotated[float | None, _train("lr")] = None,
    batch_size: Annotated[int | None, _train("batch_size")] = None,
    minutes: Annotated[float | None, _train("minutes")] = None,
    max_epochs: Annotated[int | None, _train("max_epochs")] = None,
    seed: Annotated[int | None, _train("seed")] = None,
    device: Annotated[str | None, _train("device")] = None,
    step: Annotated[str | None, _train("step")] = None,
    beta: Annotated[float | None, _train("beta")] = None,
    alpha: Annotated[float | None, _train("alpha")] = None,
    steps_per_epoch: Annotated[int | None, _train("steps_per_epoch")] = None,
    val_batches: Annotated[int | None, _train("val_batches")] = None,
    lr_decay_epoch: Annotated[int | None, _train("lr_decay_epoch")] = None,
    data: Annotated[Path | None, option(help=f"HDF5 dataset [default: {_DATA_HELP}].")] = None,
    dataset: Annotated[str | None, option(help=f"Named dataset: {_DATASET_HELP}.")] = None,
    data_dir: Annotated[Path | None, option(help=f"Torchvision root (e.g. DIR/MNIST/raw/): {_DATA_DIR_HELP}.")]
    = None,
    name: Annotated[str | None, option(help="Run name [default: MODEL-CODE-sSEED].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    resume: Annotated[str | None, option(help=f"Continue the run with this name or folder, in its own settings: "
                                              f"only {_RESUMABLE_FLAGS} may be given with it.")] = None,
) -> None:
    """Train a registered model on its task until the time budget is spent.

    Defaults depend on the model's task family (shown per family; `swarmctl models` lists each model's
    task). Writes runs/NAME/: config.json, metrics.jsonl, best.pt, last.pt, curves.png. Launch with
    `torchrun --nproc_per_node=N -m swarmctl train ...` for several GPUs or processes.
    """
    given = ctx.params  # every option above by its name: the hyper-parameters by option, TrainConfig's by field
    # the library loads when the command runs, not when the CLI starts: `train --help` imports no PyTorch
    from swarmctl.cli._progress import EpochProgress
    from swarmctl.models import HYPERPARAMETERS
    from swarmctl.plots.curves import save_run_curves
    from swarmctl.runs import train

    trained = train(
        model, {h.field: given[h.option] for h in HYPERPARAMETERS},
        {field: given[field] for field in _ROWS if field in given}, runs_dir, data=data, dataset=dataset,
        data_dir=data_dir, name=name, resume=resume,
        display=EpochProgress, draw=save_run_curves, announce=say, default_runs_dir=RUNS_DIR,
        on_continue=continue_with)  # a signal while drawing
    if trained is None:  # not rank 0: rank 0 reports
        return
    stop_if_interrupted(trained.finished.message)
    result = trained.result
    say(f"done ({result.stop_reason}): best val {result.best_val:.4f} at epoch {result.best_epoch}, "
        f"{result.epochs} epochs, {result.backtracks} backtracks, net {result.net_seconds / 60:.1f} min "
        f"+ {result.eval_seconds / 60:.1f} min validation/checkpoints -> {result.run_dir}")

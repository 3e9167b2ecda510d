"""`swarmctl train`: any registered model on its task, time-budgeted, resumable."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmctl.catalog import catalog, models, per_task
from swarmctl.catalog import tasks as catalog_tasks
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, RunsDir, argument, checked, float_option, option, say, user_errors
from swarmctl.config import RESUMABLE, TRAIN_OPTIONS, ModelConfig, TrainConfig, TrainOption
from swarmctl.errors import either

_TASKS = catalog_tasks()
_NAMED_DATA = [t for t in _TASKS if t["datasets"]]  # tasks whose data is a named dataset in a folder
_DATA_HELP = "; ".join(f"{t['name']}: {t['train_data_help']}" for t in _TASKS)
_DATASET_HELP = "; ".join(f"{t['name']} models: {', '.join(t['datasets'])} [default: {t['default_dataset']}]"
                          for t in _NAMED_DATA) or "not used by any task"
_DATA_DIR_HELP = "; ".join(f"{t['name']} models: the folder holding the files [default: {t['default_data']}]"
                           for t in _NAMED_DATA) or "not used by any task"


_ALWAYS_ALLOWED = {"model", "resume", "runs_dir"}
_RESUMABLE_FLAGS = either(("--" + n.replace("_", "-") for n in RESUMABLE), "and")  # what a resume may change


def _refuse_fixed_options(ctx: typer.Context) -> None:
    """A resumed run keeps its own settings: an option it cannot change is a usage error (exit 2)."""
    given = [name for name in ctx.params if name not in _ALWAYS_ALLOWED and name not in RESUMABLE
             and getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        flags = either(("--" + name.replace("_", "-") for name in given), "and")
        raise typer.BadParameter(f"{flags} cannot change when resuming (the run keeps its own); drop "
                                 f"{'it' if len(given) == 1 else 'them'}, or start a new run with --name. Only "
                                 f"{_RESUMABLE_FLAGS} may change.")


_THE_MODELS = "the model's"
_TYPES = {"int": int, "float": float, "str": str}


class _TaskDefaults(dict):
    """``{FIELD}`` in a train option's help: that field's default per task."""

    def __missing__(self, key: str) -> str:
        return per_task("defaults." + key)


def _hyperparameter(h: dict[str, Any], model_config: ModelConfig) -> inspect.Parameter:
    """The option of one row of the models' hyper-parameter table (read from the help catalog). None, the
    default, leaves the model's own default."""
    default = getattr(model_config, h["field"])
    text = f"{h['help']} [default: {_THE_MODELS if default is None else default}]."
    kind = _TYPES[h["type"]]
    make = float_option if kind is float else option
    return inspect.Parameter(h["option"], inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[kind | None, make(help=text)])


def _train_option(row: TrainOption) -> inspect.Parameter:
    """The option of one row of :data:`TRAIN_OPTIONS`: a switch, or a value checked by TrainConfig as it is
    parsed (exit 2) whose default, None, is the task's (shown per task)."""
    if row.switch:
        flag = "--" + row.field.replace("_", "-")
        return inspect.Parameter(row.field, inspect.Parameter.KEYWORD_ONLY, default=False,
                                 annotation=Annotated[bool, option(flag, help=row.help + ".")])
    text = f"{row.help.format_map(_TaskDefaults())} [default: {per_task('defaults.' + row.field)}]."
    kind = _TYPES[row.type.split("|")[0].strip()]
    check = checked(lambda value, flag: TrainConfig(**{row.field: value}))  # the value alone, against the defaults
    return inspect.Parameter(row.field, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[kind | None, option(help=text, callback=check)])


def _table_options(command: Any) -> Any:
    """Give ``command`` one option per row of the two tables, after its model argument: the model
    hyper-parameters (``--hidden``, ``--iters``, ...), then the train options (``--lr``, ...). It receives
    them in ``**options``: hyper-parameters by option name, train options by field name."""
    params = list(inspect.signature(command, eval_str=True).parameters.values())
    params = [p for p in params if p.kind is not p.VAR_KEYWORD]
    at = [p.name for p in params].index("model") + 1
    added = [_hyperparameter(h, ModelConfig()) for h in catalog()["hyperparameters"]]
    added += [_train_option(row) for row in TRAIN_OPTIONS]
    assert len({p.name for p in params + added}) == len(params + added), "an option name is taken twice"
    positional = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[at:]]
    command.__signature__ = inspect.Signature(params[:at] + added + positional)
    return command


@app.command("train")
@_table_options
def train_cmd(
    ctx: typer.Context,
    model: Annotated[str, argument(help=f"Registered model: {', '.join(models())}.")],
    data: Annotated[Path | None, option(help=f"HDF5 dataset [default: {_DATA_HELP}].")] = None,
    dataset: Annotated[str | None, option(help=f"Named dataset: {_DATASET_HELP}.")] = None,
    data_dir: Annotated[Path | None, option(help=f"Torchvision root (e.g. DIR/MNIST/raw/): {_DATA_DIR_HELP}.")]
    = None,
    name: Annotated[str | None, option(help="Run name [default: MODEL-CODE-sSEED].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    resume: Annotated[str | None, option(help=f"Continue the run with this name or folder, in its own settings: "
                                              f"only {_RESUMABLE_FLAGS} may be given with it.")] = None,
    **options: Any,
) -> None:
    """Train a registered model on its task until the time budget is spent.

    Defaults depend on the model's task family (shown per family; `swarmctl models` lists each model's
    task). Writes runs/NAME/: config.json, metrics.jsonl, best.pt, last.pt, curves.png. Launch with
    `torchrun --nproc_per_node=N -m swarmctl train ...` for several GPUs or processes.
    """
    # the library loads when the command runs, not when the CLI starts: `train --help` imports no PyTorch
    from swarmctl.cli._fit import report_interrupted
    from swarmctl.cli._progress import EpochProgress
    from swarmctl.models import HYPERPARAMETERS
    from swarmctl.plots.curves import save_run_curves
    from swarmctl.runs import train

    if resume is not None:
        _refuse_fixed_options(ctx)
    with user_errors() as interruption:
        trained = train(
            model, {h.field: options[h.option] for h in HYPERPARAMETERS},
            {row.field: options[row.field] for row in TRAIN_OPTIONS}, runs_dir, data=data, dataset=dataset,
            data_dir=data_dir, name=name, resume=resume,
            display=EpochProgress, draw=save_run_curves, announce=say, default_runs_dir=RUNS_DIR,
            on_continue=lambda command: setattr(interruption, "hint", command))  # a signal while drawing
        if trained is None:  # not rank 0: rank 0 reports
            return
        report_interrupted(trained.finished)
    result = trained.result
    say(f"done ({result.stop_reason}): best val {result.best_val:.4f} at epoch {result.best_epoch}, "
        f"{result.epochs} epochs, {result.backtracks} backtracks, net {result.net_seconds / 60:.1f} min "
        f"+ {result.eval_seconds / 60:.1f} min validation/checkpoints -> {result.run_dir}")

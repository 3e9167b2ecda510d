"""`swarmctl train`: any registered model on its task, time-budgeted, resumable."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmctl.catalog import catalog, models, per_task
from swarmctl.catalog import tasks as catalog_tasks
from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    RunsDir,
    argument,
    device_name,
    float_option,
    option,
    say,
    seed_option,
    user_errors,
)
from swarmctl.config import ModelConfig, TrainConfig
from swarmctl.errors import either

_TASKS = catalog_tasks()
_NAMED_DATA = [t for t in _TASKS if t["datasets"]]  # tasks whose data is a named dataset in a folder
_DATA_HELP = "; ".join(f"{t['name']}: {t['train_data_help']}" for t in _TASKS)
_DATASET_HELP = "; ".join(f"{t['name']} models: {', '.join(t['datasets'])} [default: {t['default_dataset']}]"
                          for t in _NAMED_DATA) or "not used by any task"
_DATA_DIR_HELP = "; ".join(f"{t['name']} models: the folder holding the files [default: {t['default_data']}]"
                           for t in _NAMED_DATA) or "not used by any task"


def _with_default(text: str, field: str) -> str:
    return f"{text} [default: {per_task('defaults.' + field)}]."


_ALWAYS_ALLOWED = {"model", "resume", "runs_dir"}


def _refuse_fixed_options(ctx: typer.Context) -> None:
    """A resumed run keeps its own settings: an option it cannot change is a usage error (exit 2)."""
    from swarmctl.runs import RESUMABLE

    given = [name for name in ctx.params if name not in _ALWAYS_ALLOWED and name not in RESUMABLE
             and getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        flags = either(("--" + name.replace("_", "-") for name in given), "and")
        raise typer.BadParameter(f"{flags} cannot change when resuming (the run keeps its own); drop "
                                 f"{'it' if len(given) == 1 else 'them'}, or start a new run with --name. Only "
                                 f"{either(('--' + n.replace('_', '-') for n in RESUMABLE), 'and')} may change.")


_THE_MODELS = "the model's"
_TYPES = {"int": int, "float": float, "str": str}


def _hyperparameter_options(command: Any) -> Any:
    """Give ``command`` one option per model hyper-parameter of the registry's table (``--hidden``,
    ``--iters``, ...; read from the help catalog), after its model argument; it receives them in
    ``**hyperparameters``. None, the default, leaves the model's own default."""
    params = list(inspect.signature(command, eval_str=True).parameters.values())
    params = [p for p in params if p.kind is not p.VAR_KEYWORD]
    at = [p.name for p in params].index("model") + 1
    model_config = ModelConfig()
    added = []
    for h in catalog()["hyperparameters"]:
        default = getattr(model_config, h["field"])
        text = f"{h['help']} [default: {_THE_MODELS if default is None else default}]."
        kind = _TYPES[h["type"]]
        make = float_option if kind is float else option
        added.append(inspect.Parameter(h["option"], inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                       annotation=Annotated[kind | None, make(help=text)]))
    command.__signature__ = inspect.Signature(params[:at] + added + params[at:])
    return command


@app.command("train")
@_hyperparameter_options
def train_cmd(
    ctx: typer.Context,
    model: Annotated[str, argument(help=f"Registered model: {', '.join(models())}.")],
    lr: Annotated[float | None, float_option(help=_with_default("Adam learning rate", "lr"))] = None,
    batch_size: Annotated[int | None, option(help=_with_default("Tasks (images) per batch", "batch_size"))]
    = None,
    minutes: Annotated[float | None, float_option(help=_with_default("Net optimisation budget in minutes (validation "
                                                                     "and checkpoints excluded)", "minutes"))] = None,
    max_epochs: Annotated[int | None, option(help=_with_default("Stop after this many epochs", "max_epochs"))]
    = None,
    seed: Annotated[int, seed_option(help="Seed for initialisation, batch order and drawn tasks.")]
    = TrainConfig().seed,
    steps_per_epoch: Annotated[int | None, option(help=_with_default("Steps per epoch", "steps_per_epoch"))]
    = None,
    val_batches: Annotated[int | None, option(help=_with_default("Validation batches per epoch (tasks drawn "
                                                                       "fresh)", "val_batches"))] = None,
    lr_decay_epoch: Annotated[int | None, option(help=_with_default(
        f"Multiply the lr by {per_task('defaults.lr_decay')} once, from this epoch on", "lr_decay_epoch"))] = None,
    beta: Annotated[float | None, float_option(help=_with_default("Backtracking: fraction of epochs without "
                                                                  "improvement", "beta"))] = None,
    alpha: Annotated[float | None, float_option(help=_with_default("Backtracking: learning-rate factor", "alpha"))]
    = None,
    data: Annotated[Path | None, option(help=f"HDF5 dataset [default: {_DATA_HELP}].")] = None,
    dataset: Annotated[str | None, option(help=f"Named dataset: {_DATASET_HELP}.")] = None,
    data_dir: Annotated[Path | None, option(help=f"Torchvision root (e.g. DIR/MNIST/raw/): {_DATA_DIR_HELP}.")]
    = None,
    name: Annotated[str | None, option(help="Run name [default: MODEL-CODE-sSEED].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Annotated[str | None, option(help=_with_default("auto, cpu, cuda or cuda:N", "device"),
                                         callback=device_name)] = None,
    resume: Annotated[str | None, option(help="Continue the run with this name or folder.")] = None,
    compile: Annotated[bool, option("--compile", help="torch.compile the model (SWARM: its step).")] = False,
    amp: Annotated[bool, option("--amp", help="bfloat16 autocast.")] = False,
    cuda_graphs: Annotated[bool, option("--cuda-graphs", help="CUDA: capture each step shape in a CUDA graph "
                                                              "and replay it (ignored elsewhere).")] = False,
    **hyperparameters: Any,
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
            model, {h.field: hyperparameters[h.option] for h in HYPERPARAMETERS},
            dict(lr=lr, batch_size=batch_size, minutes=minutes, max_epochs=max_epochs, seed=seed, device=device,
                 amp=amp, compile=compile, cuda_graphs=cuda_graphs, beta=beta, alpha=alpha,
                 steps_per_epoch=steps_per_epoch, val_batches=val_batches, lr_decay_epoch=lr_decay_epoch),
            runs_dir, data=data, dataset=dataset, data_dir=data_dir, name=name, resume=resume,
            display=EpochProgress, draw=save_run_curves, default_runs_dir=RUNS_DIR,
            on_continue=lambda command: setattr(interruption, "hint", command))  # a signal while drawing
        if trained is None:  # not rank 0: rank 0 reports
            return
        report_interrupted(trained.finished)
    result = trained.result
    say(f"done ({result.stop_reason}): best val {result.best_val:.4f} at epoch {result.best_epoch}, "
        f"{result.epochs} epochs, {result.backtracks} backtracks, net {result.net_seconds / 60:.1f} min "
        f"+ {result.eval_seconds / 60:.1f} min validation/checkpoints -> {result.run_dir}")

"""`swarmctl eval`'s work: score a run with its task's metric and save the scores as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.errors import ConfigError
from swarmctl.files import atomic_write_text, staged_outputs
from swarmctl.runs import evaluate_run, open_run, shipped_models
from swarmctl.tasks import DataProgress, Task, get_task


def net_minutes(minutes: float) -> str:
    """Net minutes as commands and docs state them: one decimal (a record's 2.43 reads 2.4 everywhere;
    tests/test_numbers.py holds the docs to the same rule)."""
    return f"{minutes:.1f}"


@dataclass(frozen=True)
class Evaluation:
    """The scores (``result``, JSON types), the file they are saved in, and the task's table of them."""

    result: dict[str, Any]
    path: Path
    columns: list[str]
    rows: list[list[str]]
    unit: str  # what the task counts (tasks, images)
    whole_run: dict[str, Any] | None = None  # a shipped model: its record's net minutes and epochs of the whole run


@contextmanager
def evaluation(target: str | None, runs_dir: Path, device: str = "auto", data: Path | None = None,
               split: str | None = None, out: Path | None = None, progress: DataProgress | None = None,
               announce: Callable[[str], None] | None = None, force: bool = False,
               scoring: Callable[[int, int], None] | None = None,
               data_dir: Path | None = None) -> Iterator[Evaluation]:
    """Score ``target`` (a run, a checkpoint; None: the shipped model of the first task that has one) on
    ``split`` of ``data`` (for the image models ``data_dir`` names their folder) and save the scores as ``out``
    (default: eval-SPLIT.json beside the checkpoint, eval's own). Every output is checked before any work; the
    file appears when the block ends without error. An existing ``out`` is replaced only with ``force``; the
    datasets are never written."""
    given = data if data is not None else data_dir  # the files scored on, whichever option named them
    with staged_outputs([given], replace=force or out is None) as outputs:
        if target is None and out is None:  # before a fresh checkout's dataset is generated for the shipped model
            outputs.folder(runs_dir)
        elif target is None:
            outputs.file(out)  # a run's output is checked once its dataset, an input, is known
        opened = open_run(target, runs_dir, device, data=given, progress=progress)
        _check_data_options(opened.task, data, data_dir)
        if opened.shipped and announce is not None:
            announce(f"scoring the shipped model {opened.checkpoint}")
        # the run's own dataset is never written, also when --data scores another (a resume or a later eval
        # of the run reads it)
        outputs.input(opened.checkpoint, given, opened.config.get("data", {}).get("path"))
        if out is None:
            outputs.folder(opened.dir)
        else:
            outputs.file(out)  # never over the checkpoint it reads, nor a run's own files
        res = evaluate_run(opened, given, split, progress=scoring)
        path = Path(out or opened.dir / f"eval-{res['split']}.json")
        task = get_task(res["task"])
        columns, rows = task.eval_table(res)
        atomic_write_text(path, json.dumps(res, indent=2) + "\n")
        yield Evaluation(res, path, columns, rows, task.unit, _whole_run(opened.checkpoint) if opened.shipped else None)


def _check_data_options(task: Task, data: Path | None, data_dir: Path | None) -> None:
    """A file for the tasks that read one (`data`), a folder for those whose data is a named dataset in one
    (`data_dir`): the same names as `train`'s."""
    if task.datasets and data is not None:
        raise ConfigError(f"{task.name} models read their files from a folder: name it with `data_dir`, not `data`")
    if not task.datasets and data_dir is not None:
        raise ConfigError(f"`data_dir` names the folder of a named dataset's files, which {task.name} models do "
                          "not read; score them on a file with `data`")


def _whole_run(checkpoint: Path) -> dict[str, Any] | None:
    """The net minutes and epochs of the run a shipped checkpoint was taken from, as its record states them
    (the checkpoint itself holds the minutes when it was saved, at its best epoch)."""
    record = next((m.record for m in shipped_models() if m.checkpoint.resolve() == checkpoint.resolve()), {})
    whole = {key: record.get(key) for key in ("net_minutes", "epochs")}
    return whole if all(isinstance(v, (int, float)) for v in whole.values()) else None

"""Tasks, one module each: the only place that knows a task by name.

Every registered model names its task; :func:`task_of` maps a model to its :class:`Task`. Adding a
task is a new module here plus one entry in ``TASKS``.
"""

from __future__ import annotations

from swarmctl.errors import ConfigError
from swarmctl.models import get_spec
from swarmctl.tasks.base import DataProgress, Prepared, Task
from swarmctl.tasks.clustering import ClusteringTask
from swarmctl.tasks.image import ImageTask
from swarmctl.tasks.mog import MogTask

TASKS: dict[str, Task] = {task.name: task for task in (ClusteringTask(), MogTask(), ImageTask())}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


def data_task(kind: str) -> Task:
    """The task whose data `swarmctl gen-data --task KIND` writes."""
    kinds = {t.data_kind: t for t in TASKS.values() if t.data_kind is not None}
    try:
        return kinds[kind]
    except KeyError:
        raise ConfigError(f"task must be {' or '.join(kinds)}, got {kind!r}") from None


DATA_KINDS = tuple(t.data_kind for t in TASKS.values() if t.data_kind is not None)


def task_of(model_name: str) -> Task:
    """The task the registered model ``model_name`` is trained on."""
    return get_task(get_spec(model_name).task)


__all__ = ["DATA_KINDS", "TASKS", "data_task", "DataProgress", "Prepared", "Task", "get_task", "task_of"]

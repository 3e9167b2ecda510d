"""Tasks, one module each: the only place that knows a task by name.

Every registered model names its task; :func:`task_of` maps a model to its :class:`Task`. Adding a
task is a new module here plus one entry in ``TASKS``; the commands, their help and the generic tests
read the registry.
"""

from __future__ import annotations

from swarmctl.errors import CheckpointError, ConfigError, either
from swarmctl.models import get_spec, list_models
from swarmctl.tasks.base import DataProgress, Task
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
    """The task whose data `swarmctl gen-data --kind KIND` writes."""
    kinds = {t.data_kind: t for t in TASKS.values() if t.data_kind is not None}
    try:
        return kinds[kind]
    except KeyError:
        raise ConfigError(f"`kind` must be {either(kinds)}, got {kind!r}") from None


def tasks_for(study: str) -> list[Task]:
    """The tasks whose runs ``study`` (a command: eval, plot-entropy, sample, ...) can work on."""
    return [t for t in TASKS.values() if study in t.studies]


def require_study(task: Task, study: str, what: str) -> None:
    """Refuse ``what`` (a run, in words) of ``task`` when ``study`` cannot work on that task's runs."""
    if study not in task.studies:
        able = tasks_for(study)
        models = [m for t in able for m in list_models(t.name)]  # every one: a list cut short hid the shipped swarm
        names = " or ".join(t.name for t in able)
        raise CheckpointError(f"{study} needs {_article(names)} {names} run ({', '.join(models)}); {what} is "
                              f"{_article(task.name)} {task.name} run")


def _article(word: str) -> str:
    """"an" before a word that starts with a vowel sound (an image run), else "a"."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def task_of(model_name: str) -> Task:
    return get_task(get_spec(model_name).task)


__all__ = ["TASKS", "DataProgress", "Task", "data_task", "get_task", "require_study",
           "task_of", "tasks_for"]

"""What the commands' ``--help`` shows of the tasks and models, read without importing PyTorch.

``catalog.json`` beside this module is generated from the registries by
``python -m tools.help_catalog`` (``tools/help_catalog.py``, in the checkout); a test fails when it is stale.
The commands build their help from it and import the library (and PyTorch) only when they run.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


@functools.cache
def catalog() -> dict[str, Any]:
    """The catalog: ``tasks`` (each task's help texts, defaults, datasets, data kind and studies), ``models``
    (name and task, in registry order), ``hyperparameters`` (the model options) and ``cluster_chunk_size``."""
    return json.loads(resources.files("swarmctl").joinpath("catalog.json").read_text(encoding="utf-8"))


def tasks(study: str | None = None) -> list[dict[str, Any]]:
    """The tasks in registry order; with ``study``, those whose runs that command can use."""
    return [t for t in catalog()["tasks"] if study is None or study in t["studies"]]


def models() -> list[str]:
    return [m["name"] for m in catalog()["models"]]


_NONE_MEANS = {"steps_per_epoch": "one pass", "val_batches": "the validation split", "lr_decay_epoch": "never"}


def _shown(key: str, value: Any) -> str:
    if value is None:
        return _NONE_MEANS.get(key, "-")
    return f"{value:g}" if isinstance(value, float) else str(value)


def per_task(key: str, study: str | None = None) -> str:
    """Each task's value of ``key`` for a help text, tasks with the same value together, e.g.
    ``clustering, mog: 0.01; image: 0.001``; the value alone when all tasks agree. ``key`` is a task
    attribute (``default_split``) or a training default (``defaults.lr``)."""
    by_value: dict[str, list[str]] = {}
    for task in tasks(study):
        where, _, name = key.rpartition(".")
        value = (task[where] if where else task)[name]
        by_value.setdefault(_shown(name, value), []).append(task["name"])
    if len(by_value) == 1:
        return next(iter(by_value))
    return "; ".join(f"{', '.join(names)}: {shown}" for shown, names in by_value.items())

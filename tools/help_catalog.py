"""The help catalog: what the commands' ``--help`` shows of the tasks and models (names, defaults, help texts),
as plain data in ``swarmctl/catalog.json``, so that `swarmctl COMMAND --help` answers without importing PyTorch.
A maintainers' tool, run from the checkout: it writes into the swarmctl it imports.

The catalog is generated from the registries (:data:`swarmctl.tasks.TASKS`, the models, HYPERPARAMETERS) by
one command, :data:`REGENERATE`; a test regenerates it and fails, naming that command, when the checked-in
file differs. Read it with :func:`swarmctl.catalog.catalog`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import swarmctl
from swarmctl.files import atomic_write_text
from swarmctl.models import get_spec, list_models
from swarmctl.models.registry import HYPERPARAMETERS
from swarmctl.tasks import TASKS
from swarmctl.tasks.point_clusters import CHUNK_SIZE

REGENERATE = "python -m tools.help_catalog"
CATALOG_FILE = Path(swarmctl.__file__).resolve().parent / "catalog.json"


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def build_catalog() -> dict[str, Any]:
    """The catalog of the registries as they are now: plain JSON types, in registry order."""
    tasks = []
    for t in TASKS.values():
        entry: dict[str, Any] = {
            "name": t.name, "summary": t.summary, "defaults": dataclasses.asdict(t.defaults),
            "default_data": _plain(t.default_data), "train_data_help": t.train_data_help,
            "default_split": t.default_split, "eval_data_help": t.eval_data_help, "metric_help": t.metric_help,
            "studies": sorted(t.studies), "datasets": list(t.datasets), "default_dataset": t.default_dataset,
            "data_kind": t.data_kind, "data_kind_help": t.data_kind_help,
            "generator": {k: _plain(v) for k, v in t.generator.items()}, "default_tasks": t.default_tasks,
            "data_file": t.data_file("{SEED}") if t.data_kind is not None else None,
        }
        tasks.append(entry)
    return {
        "regenerate": REGENERATE,
        "tasks": tasks,
        "models": [{"name": m, "task": get_spec(m).task} for m in list_models()],
        "hyperparameters": [{"field": h.field, "option": h.option, "type": h.type.__name__, "help": h.help}
                            for h in HYPERPARAMETERS],
        "cluster_chunk_size": CHUNK_SIZE,
    }


def catalog_text() -> str:
    return json.dumps(build_catalog(), indent=1, sort_keys=False) + "\n"


def main() -> None:
    atomic_write_text(CATALOG_FILE, catalog_text())
    print(f"wrote {CATALOG_FILE}")


if __name__ == "__main__":
    main()

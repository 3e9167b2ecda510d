"""`swarmctl gen-data`'s work: a task's seeded data written to HDF5."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.files import staged_outputs
from swarmctl.tasks import DataProgress, data_task


@dataclass(frozen=True)
class GeneratedData:
    path: Path
    holds: str  # what the file holds, in words
    checksum: str
    seconds: float


@contextmanager
def generated_data(kind: str, out: Path | None, seed: int, tasks: int | None = None, force: bool = False,
                   progress: DataProgress | None = None, **params: Any) -> Iterator[GeneratedData]:
    """Generate the data of ``kind`` (a `gen-data` kind) with ``seed`` into ``out`` (default: the kind's file
    for the seed); ``params`` are some of its generator's parameters (None: the default). The file appears
    when the block ends without error, or not at all; an existing one is replaced only with ``force``."""
    task = data_task(kind)
    with staged_outputs(replace=force):
        start = time.perf_counter()
        path, info, holds = task.generate_data(out, seed, tasks, force=force, progress=progress,
                                               **{k: v for k, v in params.items() if v is not None})
        yield GeneratedData(Path(path), holds, str(info["checksum"]), time.perf_counter() - start)

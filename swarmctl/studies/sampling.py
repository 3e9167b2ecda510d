"""Class-conditional samples from a trained SWARM Transformer, and choosing the run to sample from."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from swarmctl.config import check_memory
from swarmctl.devices import memory_limit
from swarmctl.errors import CheckpointError, command_line
from swarmctl.files import atomic_write, check_png, staged_outputs
from swarmctl.models import list_models
from swarmctl.rundir import RunDir
from swarmctl.runs import list_runs, open_run
from swarmctl.tasks import tasks_for

STUDY = "sample"


@dataclass(frozen=True)
class SampleGrid:
    """images (n_classes, per_class, C, H, W) uint8; row k holds class k."""

    images: np.ndarray
    label: str
    temperature: float
    seed: int
    seconds: float


@torch.no_grad()
def sample_grid(model: nn.Module, label: str, per_class: int = 2, temperature: float = 1.0, seed: int = 0,
                n_classes: int = 10, incremental: bool = True, device: torch.device | str = "cpu",
                progress: Callable[[int, int], None] | None = None) -> SampleGrid:
    """``per_class`` images for each class, drawn together in one batch; ``progress(done, total)`` after each
    sub-pixel position."""
    check_memory(_sampling_bytes(model, n_classes * per_class, incremental), memory_limit(torch.device(device)),
                 f"sampling {n_classes * per_class:,} images", "lower `per_class`")
    y = torch.arange(n_classes, device=device).repeat_interleave(per_class)
    gen = torch.Generator(device=device).manual_seed(seed)
    start = time.perf_counter()
    images = model.sample(y, temperature=temperature, generator=gen, incremental=incremental,
                          progress=progress).cpu().numpy()
    C, H, W = images.shape[1:]
    return SampleGrid(images.reshape(n_classes, per_class, C, H, W), label, temperature, seed,
                      time.perf_counter() - start)


def _sampling_bytes(model: nn.Module, n_images: int, incremental: bool) -> float:
    """A lower bound of the memory drawing ``n_images`` at once takes: the canvas (int64 per sub-pixel),
    the noise and logits of a step, and per layer a few float32 states of the hidden size (incremental),
    or the hidden states of every sub-pixel (full recompute)."""
    positions = getattr(model, "n_positions", 1)
    hidden = max((p.shape[-1] for p in model.parameters()), default=1)  # at least the hidden size
    per_image = 8 * positions + 4 * 8 * 256 + 4 * 4 * hidden
    if not incremental:
        per_image += 4 * positions * hidden
    return float(n_images) * per_image


def _newest_sample_run(runs_dir: Path, dataset: str) -> Path:
    """The run in ``runs_dir`` with the most recently written best.pt whose task can be sampled and whose
    model was trained on ``dataset``."""
    able = {t.name for t in tasks_for(STUDY)}
    found = []
    for run_dir, cfg in list_runs(runs_dir):
        best = RunDir(run_dir).best
        if cfg.get("run", {}).get("task") in able and cfg["model"].get("dataset") == dataset and best.is_file():
            found.append((best.stat().st_mtime, run_dir))
    if not found:
        models = [m for t in tasks_for(STUDY) for m in list_models(t.name)]
        raise CheckpointError(f"no trained {' or '.join(sorted(able))} run for {dataset} in {runs_dir}; train one "
                              f"with {command_line('train', models[0] if models else 'MODEL', dataset=dataset)} or "
                              "name a `run`")
    return max(found)[1]


@dataclass(frozen=True)
class Samples:
    """A grid of sampled images and the PNG file it is drawn to (the images themselves go beside it, .npy)."""

    grid: SampleGrid
    path: Path

    @property
    def array(self) -> Path:
        return self.path.with_suffix(".npy")


@contextmanager
def samples(run: str | None, runs_dir: Path, dataset: str, device: str = "auto", per_class: int = 2,
            temperature: float = 1.0, seed: int = 0, out: Path | None = None, incremental: bool = True,
            announce: Callable[[str], None] | None = None, force: bool = False,
            progress: Callable[[int, int], None] | None = None) -> Iterator[Samples]:
    """`swarmctl sample`'s work: ``per_class`` images of every class from ``run`` (None: the newest finished
    run for ``dataset``, else the shipped model), their array saved as ``out`` with .npy (default:
    RUN/samples-sSEED.png, sample's own). An existing ``out`` or its .npy is replaced only with ``force``; the
    caller draws the figure inside the block, and both files appear, or neither."""
    check_png(out, "out")
    with staged_outputs(replace=force or out is None) as outputs:
        if out is not None:
            outputs.file(out)
            outputs.file(Path(out).with_suffix(".npy"))
        if run is not None:
            opened = open_run(run, runs_dir, device, study=STUDY)
        else:
            try:
                opened = open_run(_newest_sample_run(runs_dir, dataset), runs_dir, device, study=STUDY)
            except CheckpointError as no_run:  # no local run: the shipped model for the dataset, if any
                try:
                    opened = open_run(None, runs_dir, device, study=STUDY, dataset=dataset)
                except CheckpointError:
                    raise no_run from None
                if announce is not None:
                    announce(f"no {dataset} run in {runs_dir}: using the shipped model {opened.checkpoint}")
        outputs.input(opened.checkpoint)
        path = Path(out or opened.dir / f"samples-s{seed}.png")
        for written in (path, path.with_suffix(".npy")):  # never over the checkpoint it reads
            outputs.file(written)
        grid = sample_grid(opened.model, f"{opened.label} on {opened.model_cfg.dataset}", per_class, temperature,
                           seed, incremental=incremental, device=opened.device, progress=progress)
        atomic_write(path.with_suffix(".npy"), lambda fh: np.save(fh, grid.images))
        yield Samples(grid, path)

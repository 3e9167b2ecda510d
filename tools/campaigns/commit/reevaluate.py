"""The commit's third step: whether a candidate replaces its shipped model. Its returned number is checked
by a re-evaluation here, on the CPU, on a fixed subset of the split the number is on (the data it was
trained on, found by its content checksum); it replaces the shipped model only when that number holds and
it scores lower than the shipped weights on the same items."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from swarmctl.config import DataConfig
from swarmctl.data.dataset import bucketed_batches
from swarmctl.data.hdf5 import read_dataset
from swarmctl.data.images import ImageBatches, ImageSet, load_images
from swarmctl.errors import SwarmctlError, command_line
from swarmctl.models import get_spec
from swarmctl.tasks import get_task
from swarmctl.tasks.clustering import clustering_loss
from swarmctl.tasks.image import image_loss
from swarmctl.training.checkpoint import load_checkpoint
from swarmctl.training.device import full_precision
from tools.campaigns.commit.unpack import NoData, Refused, _check_committed_file, _number, _one_line, _show, parse_json
from tools.campaigns.commit.validate import Candidate, _build

# items re-evaluated: the whole seed-0 validation split of 1,000 tasks (a few seconds per SWARM 192-10-1,
# so only the rounding allowance is left), 500 of the 10,000 test images (~35 s per swarm-image 256-10-1 on
# 2 CPU cores; 4 standard errors are then a few % of the loss)
SUBSET = {"clustering": 1000, "image": 500}
Z = 4.0  # standard errors the re-evaluation may differ by (a false refusal about once in 16,000)
RTOL = 1e-3  # rounding allowance, relative: the card's TF32 and the CPU agree to about 1e-5


@dataclass(frozen=True)
class CommitOptions:
    """What `python -m tools.campaigns commit` was given besides the folders: where the re-evaluation's data is, how
    many items it scores, and whether shipped models are left alone."""

    data_dir: Path | None = None
    clustering_data: Path | None = None
    subset: int | None = None
    keep_shipped: bool = False


@dataclass
class Check:
    """A candidate's re-evaluation, in its task's loss (nats per point or per sub-pixel)."""

    split: str
    items: int
    of: int
    returned: float
    candidate: float
    tolerance: float
    shipped: float | None

    def record(self) -> dict[str, Any]:
        return {"split": self.split, "items": self.items, "of": self.of, "returned_loss": self.returned,
                "candidate_loss": self.candidate, "tolerance": self.tolerance, "shipped_loss": self.shipped,
                "how": "python -m tools.campaigns commit, on the CPU, a seed-0 subset of the split"}


def find_shipped(pretrained: Path, cand: Candidate) -> tuple[Path, dict[str, Any]] | None:
    """The record of the shipped model ``cand`` may replace: same model and code, and, where the record
    holds them, the same dataset (image models) and model config."""
    if not pretrained.is_dir():
        return None
    model, code = cand.config["model"]["name"], cand.config["run"]["code"]
    for path in sorted(pretrained.glob("*.json")):
        _check_committed_file(path)
        record = parse_json(path.read_bytes(), str(path))
        if not isinstance(record, dict) or record.get("model") != model or record.get("code") != code:
            continue
        if get_spec(model).task == "image" and record.get("dataset") != cand.campaign:
            continue
        if isinstance(record.get("config"), dict) and record["config"].get("model") != cand.config["model"]:
            continue
        file = record.get("file")
        if not isinstance(file, str) or Path(file).name != file or Path(file).stem != path.stem \
                or not file.endswith(".pt"):
            raise Refused(f"{path}: its file {_show(file)} is not {path.stem}.pt; repair the record first")
        if os.path.lexists(pretrained / file):
            _check_committed_file(pretrained / file)
        return path, record
    return None


def _record_checksum(record: dict[str, Any]) -> str | None:
    """The data checksum in a shipped model's record (None: the record has none)."""
    config = record.get("config")
    data = config.get("data") if isinstance(config, dict) else None
    checksum = data.get("checksum") if isinstance(data, dict) else None
    return checksum if isinstance(checksum, str) else None


def _candidate_paths(config_path: Any, task: str) -> list[Path]:
    """Where the data may be: the path a run's config names (absolute, or relative to the current folder,
    the repository's root), then the task's default data (the one data folder, ``config.DATA_DIR``)."""
    paths = [Path(config_path)] if isinstance(config_path, str) and config_path else []
    return list(dict.fromkeys([*paths, Path(get_task(task).default_data)]))


def clustering_items(cand: Candidate, explicit: Path | None) -> Any:
    """The validation split of the clustering file the run was trained on (its content checksum)."""
    want, tried = cand.config["data"].get("checksum"), []
    for path in [explicit] if explicit else _candidate_paths(cand.config["data"].get("path"), cand.ckpt.task):
        if not path.is_file():
            tried.append(f"{path} (missing)")
            continue
        try:
            splits, info = read_dataset(path)
        except SwarmctlError:
            tried.append(f"{path} (unreadable)")
            continue
        if info["checksum"] != want or "val" not in splits:
            tried.append(f"{path} (other data)")
            continue
        return splits["val"]
    raise NoData(f"{cand.label} would replace a shipped model, but the clustering data it was trained on is not "
                 f"here to re-evaluate it ({'; '.join(tried)}); make it with {command_line('gen-data', seed=0)} "
                 f"({get_task(cand.ckpt.task).default_data}) or pass `clustering_data`")


@contextlib.contextmanager
def _no_download() -> Iterator[None]:
    old = os.environ.get("SWARMCTL_NO_DOWNLOAD")
    os.environ["SWARMCTL_NO_DOWNLOAD"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["SWARMCTL_NO_DOWNLOAD"]
        else:
            os.environ["SWARMCTL_NO_DOWNLOAD"] = old


def image_items(cand: Candidate, explicit: Path | None) -> ImageSet:
    """The test split of the torchvision files the run was trained on (its data checksum)."""
    data_cfg, dataset = cand.ckpt.data_config, cand.ckpt.model_config.dataset
    tried = []
    for root in [explicit] if explicit else _candidate_paths(data_cfg.path, cand.ckpt.task):
        if not root.is_dir():
            tried.append(f"{root} (missing)")
            continue
        try:
            with _no_download():
                prepared = get_task("image").prepare(cand.ckpt.train_config, DataConfig(path=str(root),
                                                                                         dataset=dataset))
            test = load_images(dataset, root, train=False, download=False)
        except SwarmctlError:
            tried.append(f"{root} (no readable {dataset} files)")
            continue
        if prepared.checksum != data_cfg.checksum:
            tried.append(f"{root} (other {dataset} files)")
            continue
        return test
    raise NoData(f"{cand.label} would replace a shipped model, but the {dataset} files it was trained on are not "
                 f"here to re-evaluate it ({'; '.join(tried)}); put torchvision's {dataset} files under "
                 f"{get_task(cand.ckpt.task).default_data}/ or pass `data_dir`")


def subset(population: int, n: int) -> np.ndarray:
    """The fixed items re-evaluated: the first ``n`` of a seed-0 permutation, in order."""
    return np.sort(np.random.default_rng(0).permutation(population)[: min(n, population)])


@torch.no_grad()
def per_item_losses(model: torch.nn.Module, items: Any, task: str) -> torch.Tensor:
    """The task's loss of each item (a clustering task, an image), float64."""
    model.eval()
    with full_precision():  # reported numbers are scored without TF32 or autocast, as `swarmctl eval` scores
        if task == "clustering":
            losses = [clustering_loss(model, b).double() for b in bucketed_batches(items, 100)]
        else:
            batches = ImageBatches(items, 50)
            losses = [image_loss(model, batches[i]).double() for i in range(len(batches))]
    return torch.cat(losses)


def tolerance(losses: torch.Tensor, population: int) -> float:
    """How far the mean of ``losses`` (a random subset of ``population`` items) may be from the mean over
    all of them: Z standard errors of the subset's own losses, times the finite-population correction,
    plus the rounding allowance."""
    n = len(losses)
    sd = float(losses.std()) if n > 1 else 0.0
    fpc = math.sqrt(max(population - n, 0) / (population - 1)) if population > 1 else 0.0
    return Z * sd / math.sqrt(n) * fpc + RTOL * abs(float(losses.mean())) + 1e-9


def reevaluate(cand: Candidate, shipped: Path | None, items: Any, n: int,
               say: Callable[[str], None] = lambda line: None) -> Check:
    """Score ``cand`` (and the shipped checkpoint, when there is one) on the same fixed items; refuse a
    returned number the candidate's own losses contradict."""
    task, split = cand.ckpt.task, cand.scored["split"]
    population = len(items)
    if cand.scored["tasks"] != population:
        raise Refused(f"{cand.label}: its evaluation counts {cand.scored['tasks']} {split} items, the data it was "
                      f"trained on has {population}; the returned number is not trusted")
    index = subset(population, n)
    if task == "clustering":
        chosen = items.select(index)
    else:
        rows = torch.from_numpy(index)
        chosen = ImageSet(items.images[rows], items.labels[rows])
    say(f"re-evaluating {cand.label} on {len(index)} of the {population} {split} items ...")
    model = _build(cand.config)
    model.load_state_dict(cand.ckpt.model, strict=True)
    losses = per_item_losses(model, chosen, task)
    mean, tol, returned = float(losses.mean()), tolerance(losses, population), float(cand.scored["loss"])
    if abs(mean - returned) > tol:
        raise Refused(f"{cand.label}: its returned {split} loss {returned:.6f} disagrees with its re-evaluation "
                      f"here on {len(index)} of the {population} {split} items ({mean:.6f}, allowed ±{tol:.6f}); "
                      "the returned number is not trusted")
    shipped_mean = None
    if shipped is not None and shipped.is_file():
        try:
            old = load_checkpoint(shipped)
        except SwarmctlError as exc:
            raise Refused(f"the shipped model {shipped} is damaged ({_one_line(exc)[:100]}); restore it first") \
                from None
        if old.config.get("model") != cand.config["model"]:
            raise Refused(f"the shipped model {shipped} holds another model than its record says; restore it first")
        model = _build(old.config)
        model.load_state_dict(old.model, strict=True)
        shipped_mean = float(per_item_losses(model, chosen, task).mean())
    return Check(split, len(index), population, returned, mean, tol, shipped_mean)


@dataclass
class Replacement:
    cand: Candidate
    record_path: Path
    record: dict[str, Any]
    check: Check
    old: float | None
    same_data: bool  # the record's number is on the candidate's data


def consider(cand: Candidate, pretrained: Path, opts: CommitOptions, notes: list[str],
             say: Callable[[str], None] = lambda line: None) -> Replacement | None:
    """Whether ``cand`` replaces its shipped model (see the module's docstring). A shipped model trained on
    other data (another data checksum: the generator changed since) has a number that cannot be compared:
    then the candidate must beat its weights on the same items here, and a record without weights stays."""
    found = find_shipped(pretrained, cand)
    if found is None:
        return None
    record_path, record = found
    scored = record.get("eval", {})
    if not isinstance(scored, dict):
        raise Refused(f"{record_path}: its eval is not an object; repair the record first")
    old = scored.get(cand.metric)
    if old is not None:
        _number(old, f"{record_path}: eval {cand.metric}")
    new, file = cand.scored[cand.metric], record["file"]
    checksum = _record_checksum(record)
    same_data = checksum is None or checksum == cand.config["data"].get("checksum")
    if same_data and old is not None and not new < old:
        return None
    if not same_data and not (pretrained / file).is_file():
        notes.append(f"{file} kept: it was trained on other data (checksum {checksum[:12]}) and its weights are not "
                     f"here, so {cand.label} cannot be compared with it")
        return None
    if opts.keep_shipped:
        notes.append(f"{file} kept (`keep_shipped`); {cand.label} reports {cand.metric} {new:.4f}, its record {old}")
        return None
    try:
        items = clustering_items(cand, opts.clustering_data) if cand.ckpt.task == "clustering" else \
            image_items(cand, opts.data_dir)
    except NoData as exc:
        raise Refused(f"{exc}; or pass `keep_shipped` to commit the session without replacing it") from None
    check = reevaluate(cand, pretrained / file, items, opts.subset or SUBSET[cand.ckpt.task], say)
    if check.shipped is not None and not check.candidate < check.shipped:
        why = f"trained on other data (checksum {checksum[:12]})" if not same_data else \
            f"its record's {cand.metric} {old} is not what its weights score"
        notes.append(f"{file} kept: on the same {check.items} {check.split} items it scores {check.shipped:.5f}, "
                     f"{cand.label} {check.candidate:.5f} ({why})")
        return None
    return Replacement(cand, record_path, record, check, old, same_data)


def _shipped_data_path(record: dict[str, Any], cand: Candidate) -> str | None:
    """The data path the shipped model's config keeps: the record's (e.g. data/clustering-seed0.h5), else the
    task's default file, never the device machine's path."""
    config = record.get("config")
    path = config.get("data", {}).get("path") if isinstance(config, dict) and isinstance(config.get("data"),
                                                                                        dict) else None
    return path if isinstance(path, str) else get_task(cand.ckpt.task).default_data

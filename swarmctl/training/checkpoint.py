"""Checkpoints: one frozen :class:`Checkpoint` (model and optimizer state, training state, the run's full
config and its task), written atomically with a content digest, loaded with ``weights_only=True`` and
validated in full; :class:`TrainState`, the typed training state a checkpoint holds; and
:class:`RunWriter`, where the trainer writes a run's checkpoints and metrics."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from swarmctl import __version__
from swarmctl.config import DataConfig, ModelConfig, TrainConfig, current_sections, from_dict, has_type
from swarmctl.errors import CheckpointError
from swarmctl.files import atomic_write, atomic_write_text, check_regular_file, read_bytes, read_metrics
from swarmctl.models import create_model, get_spec, paper_code
from swarmctl.rundir import RunDir

CHECKPOINT_FORMAT = 2  # the file format: a dict with a "digest", a SHA-256 over everything else
ENTRIES = ("task", "config", "state", "model", "optimizer", "digest")


@dataclass
class TrainState:
    """Everything besides weights that a resumed run needs; the trainer advances it in place."""

    lr: float
    epoch: int = 0  # epoch in progress (= epochs completed)
    cursor: int = 0  # batches of that epoch already done
    best_val: float = math.inf
    best_epoch: int = -1
    history: list[float] = field(default_factory=lambda: [math.inf])  # logged val losses, +inf sentinel
    net_seconds: float = 0.0  # optimisation time only
    eval_seconds: float = 0.0  # validation, checkpoints
    backtracks: int = 0
    epoch_loss_sum: float = 0.0
    epoch_loss_count: int = 0
    finished: bool = False
    stop_reason: str = ""
    lr_decayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> TrainState:
        """The state a checkpoint stores, every field checked (ValueError naming the first wrong one); unknown
        keys are ignored."""
        if not isinstance(data, dict):
            raise ValueError("is not a mapping")
        for key, low in _STATE_INTS.items():
            value = data.get(key, 0 if key in _STATE_OPTIONAL else None)
            if not has_type(value, "int") or value < low:
                raise ValueError(f"whose {key} is {value!r}, not an integer >= {low}")
        for key in _STATE_FLOATS:
            value = data.get(key, 0.0 if key in _STATE_OPTIONAL else None)
            # best_val is a validation loss: a negative log-likelihood can be below 0, +inf before the first one
            if not has_type(value, "float") or math.isnan(value) or value == -math.inf \
                    or (key != "best_val" and (math.isinf(value) or value < 0)) or (key == "lr" and value == 0):
                raise ValueError(f"whose {key} is {value!r}")
        loss_sum = data.get("epoch_loss_sum", 0.0)
        if not has_type(loss_sum, "float") or not math.isfinite(loss_sum):
            raise ValueError(f"whose epoch_loss_sum is {loss_sum!r}")
        history = data.get("history")
        if not isinstance(history, list) or not all(has_type(v, "float") for v in history):
            raise ValueError("whose history is not a list of numbers")
        for key, kind in (("finished", bool), ("lr_decayed", bool), ("stop_reason", str)):
            if key in data and not isinstance(data[key], kind):
                raise ValueError(f"whose {key} is {data[key]!r}, not a {kind.__name__}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: list(v) if k == "history" else v for k, v in data.items() if k in names})


_STATE_INTS = {"epoch": 0, "cursor": 0, "best_epoch": -1, "backtracks": 0, "epoch_loss_count": 0}  # and minimum
_STATE_FLOATS = ("lr", "best_val", "net_seconds", "eval_seconds")
_STATE_OPTIONAL = ("backtracks", "epoch_loss_count", "eval_seconds")  # may be absent: they default


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: the run's config (sections ``model``, ``train``, ``data`` and ``run``), the trainer's
    state, the weights and the Adam state (None for shipped models, which hold weights only)."""

    task: str
    config: dict[str, Any]
    state: TrainState
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None = None
    swarmctl_version: str = __version__  # of the swarmctl that wrote it (read back from the file)

    @property
    def model_config(self) -> ModelConfig:
        return from_dict(ModelConfig, self.config["model"])

    @property
    def train_config(self) -> TrainConfig:
        return from_dict(TrainConfig, self.config["train"])

    @property
    def data_config(self) -> DataConfig:
        return from_dict(DataConfig, self.config["data"])


def save_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    """Write ``ckpt`` atomically (its state as a dict). Its ``config`` must hold JSON types only."""
    json.dumps(ckpt.config)  # fail here, not at load time, if a config value is not a JSON type
    payload = {
        "format": CHECKPOINT_FORMAT,
        "swarmctl_version": __version__,
        "task": ckpt.task,
        "config": ckpt.config,
        "state": ckpt.state.to_dict(),
        "model": ckpt.model,
        "optimizer": ckpt.optimizer,
    }
    payload["digest"] = content_digest(payload)
    atomic_write(path, lambda fh: torch.save(payload, fh))


def content_digest(payload: dict[str, Any]) -> str:
    """SHA-256 over every entry but ``digest``: tensors as dtype, shape and raw bytes, the rest by repr,
    dict keys in a fixed order. torch.load checks no checksum, so this catches damaged bytes."""
    digest = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(x, dict):
            digest.update(b"{")
            for key in sorted(x, key=repr):
                digest.update(repr(key).encode() + b":")
                walk(x[key])
            digest.update(b"}")
        elif isinstance(x, list | tuple):
            digest.update(b"[" if isinstance(x, list) else b"(")
            for v in x:
                walk(v)
            digest.update(b"]")
        else:
            digest.update(f"{type(x).__name__}:{x!r};".encode())

    walk({k: v for k, v in payload.items() if k != "digest"})
    return digest.hexdigest()


def _read(path: Path, map_location: str | torch.device) -> tuple[dict[str, Any], TrainState]:
    """The file's dict, every entry present and of the right kind (config not yet checked), and its state."""
    check_regular_file(path)  # a FIFO would block torch.load for ever
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        with warnings.catch_warnings():  # a file pickled with another protocol: its content is checked below
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            raw = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for foreign or damaged files
        raise CheckpointError(f"{path} is not a readable swarmctl checkpoint ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or "format" not in raw or "config" not in raw:
        raise CheckpointError(f"{path} is not a swarmctl checkpoint")
    fmt = raw["format"]
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} has checkpoint format {fmt!r} (swarmctl {raw.get('swarmctl_version', '?')}); "
            f"this swarmctl {__version__} reads format {CHECKPOINT_FORMAT}"
        )
    for key in ENTRIES:
        if key not in raw:
            raise _damaged(path, f"lacks its {key!r} entry")
    if not isinstance(raw["config"], dict) or not isinstance(raw["task"], str):
        raise _damaged(path, "has a malformed config or task")
    try:
        state = TrainState.from_dict(raw["state"])
    except ValueError as exc:
        raise _damaged(path, f"has a training state {exc}") from None
    weights, opt = raw["model"], raw["optimizer"]
    if not isinstance(weights, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in weights.items()):
        raise _damaged(path, "has malformed model weights")
    for key, t in weights.items():
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            raise _damaged(path, f"holds NaN or infinite values in weight {key!r}")
    if opt is not None and not (isinstance(opt, dict) and isinstance(opt.get("state"), dict)
                                and isinstance(opt.get("param_groups"), list)
                                and all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                        for g in opt["param_groups"])):
        raise _damaged(path, "has a malformed optimizer state")
    return raw, state


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint` and check everything (entries, state, finite
    weights that fit the model its config builds, the digest); every problem is a one-line CheckpointError."""
    path = Path(path)
    raw, state = _read(path, map_location)
    config = _validate_config(raw["config"], path)
    model_cfg = from_dict(ModelConfig, config["model"])
    spec = get_spec(model_cfg.name)
    if raw["task"] != spec.task:
        raise CheckpointError(f"{path} is a {raw['task']!r} checkpoint but model {model_cfg.name!r} solves "
                              f"{spec.task!r}; the checkpoint is damaged or foreign")
    _validate_fit(raw["model"], model_cfg, path)
    if raw["digest"] != content_digest(raw):  # last: a foreign checkpoint is better named by the checks above
        raise _damaged(path, "does not match its content digest (bytes were changed)")
    version = raw.get("swarmctl_version")
    return Checkpoint(raw["task"], config, state, raw["model"], raw["optimizer"],
                      version if isinstance(version, str) else "?")


def _damaged(path: Path, problem: str) -> CheckpointError:
    return CheckpointError(f"{path} {problem}; the checkpoint is damaged or foreign, use another one or train again")


def _validate_config(config: Any, path: Path) -> dict[str, Any]:
    """``config`` as this version writes it (:func:`current_sections`): its sections must rebuild valid config
    objects of a registered model."""
    for section in ("model", "train", "data"):
        if not isinstance(config.get(section), dict):
            raise _damaged(path, f"has no {section!r} section in its config")
    try:
        config = current_sections(config)
        get_spec(config["model"]["name"])
    except Exception as exc:  # ConfigError, or TypeError for a value of the wrong type
        raise _damaged(path, f"has an invalid config ({_one_line(exc)})") from None
    return config


def _validate_fit(weights: dict[str, torch.Tensor], model_cfg: ModelConfig, path: Path) -> None:
    """The weights' names and shapes against the model the config builds (on the meta device: nothing
    is allocated)."""
    try:
        with torch.device("meta"):
            expected = create_model(model_cfg).state_dict()
    except Exception as exc:  # e.g. an unknown pooling, which the config classes do not check
        raise _damaged(path, f"has a config that builds no {model_cfg.name!r} model ({_one_line(exc)})") from None
    if set(weights) != set(expected) or any(weights[k].shape != expected[k].shape for k in expected):
        raise CheckpointError(f"{path}: weights do not fit model {model_cfg.name!r} ({paper_code(model_cfg)}); "
                              "the checkpoint belongs to another model")
    for key, t in expected.items():
        if weights[key].dtype != t.dtype:
            raise _damaged(path, f"stores weight {key!r} as {weights[key].dtype}, not {t.dtype}")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass(frozen=True)
class RunWriter:
    """Where :func:`swarmctl.training.loop.fit` writes one run's checkpoints and metrics (rank 0 only)."""

    dir: Path
    config: dict[str, Any]
    task: str

    def save(self, name: str, model_state: dict, optimizer_state: dict | None, state: TrainState) -> None:
        """Write checkpoint ``name`` (``LAST`` or ``BEST``) atomically."""
        save_checkpoint(self.dir / name, Checkpoint(self.task, self.config, state, model_state, optimizer_state))

    def load(self, name: str, map_location: str | torch.device = "cpu") -> Checkpoint | None:
        """Checkpoint ``name`` of the run, validated; None when the run has none of that name."""
        path = self.dir / name
        return load_checkpoint(path, map_location) if path.is_file() else None

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Add ``record`` as a line of the metrics, the file written whole again: a line that cannot be written
        leaves the file as it was, never a partial line that the next one would join."""
        path = RunDir(self.dir).metrics
        old = read_bytes(path) if path.is_file() else b""
        atomic_write(path, lambda fh: fh.write(old + (json.dumps(record) + "\n").encode()))

    def keep_metrics_before(self, epoch: int) -> None:
        """Drop the metrics lines of epoch ``epoch`` on (an epoch a killed run logged and now redoes), and a
        line cut short by a kill."""
        path = RunDir(self.dir).metrics
        if path.is_file():
            records = [r for r in read_metrics(path) if isinstance(r["epoch"], int) and r["epoch"] < epoch]
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))

"""Checkpoints: model and optimizer state, training state, the full config and the package version,
written atomically with a content digest, loaded with ``weights_only=True`` and validated in full."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from swarmctl import __version__
from swarmctl.config import DataConfig, ModelConfig, TrainConfig, from_dict
from swarmctl.errors import CheckpointError
from swarmctl.files import atomic_write
from swarmctl.models import create_model, get_spec, paper_code

CHECKPOINT_FORMAT = 2  # 2: adds "digest", a SHA-256 over everything else
READABLE_FORMATS = (1, 2)  # format 1 is format 2 without the digest
REQUIRED = ("task", "config", "state", "model", "optimizer")
STATE_INTS = {"epoch": 0, "cursor": 0, "best_epoch": -1}  # training-state integers and their minimum
STATE_FLOATS = ("lr", "best_val", "net_seconds")


def save_checkpoint(path: Path, *, model_state: dict, optimizer_state: dict | None, state: dict,
                    config: dict[str, Any], task: str) -> None:
    """Write a checkpoint atomically. ``state`` and ``config`` must hold JSON types only."""
    json.dumps(config)  # fail here, not at load time, if a config value is not a JSON type
    payload = {
        "format": CHECKPOINT_FORMAT,
        "swarmctl_version": __version__,
        "task": task,
        "config": config,
        "state": state,
        "model": model_state,
        "optimizer": optimizer_state,
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


def read_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` and check what any model's checkpoint must
    hold: every entry, a training state of the right types, finite weights, an optimizer state and a
    matching digest. :func:`load_checkpoint` also checks the config against the registered models."""
    path = Path(path)
    ckpt = _read(path, map_location)
    _check_digest(ckpt, path)
    return ckpt


def _read(path: Path, map_location: str | torch.device) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for foreign or damaged files
        raise CheckpointError(f"{path} is not a readable swarmctl checkpoint ({type(exc).__name__})") from None
    if not isinstance(ckpt, dict) or "format" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} is not a swarmctl checkpoint")
    fmt = ckpt["format"]
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt not in READABLE_FORMATS:
        raise CheckpointError(
            f"{path} has checkpoint format {fmt!r} (swarmctl {ckpt.get('swarmctl_version', '?')}); "
            f"this swarmctl {__version__} reads formats {', '.join(map(str, READABLE_FORMATS))}"
        )
    for key in REQUIRED + (("digest",) if fmt >= 2 else ()):
        if key not in ckpt:
            raise _damaged(path, f"lacks its {key!r} entry")
    if not isinstance(ckpt["config"], dict) or not isinstance(ckpt["task"], str):
        raise _damaged(path, "has a malformed config or task")
    _validate_state(ckpt["state"], path)
    _validate_weights(ckpt["model"], path)
    _validate_optimizer(ckpt["optimizer"], path)
    return ckpt


def _check_digest(ckpt: dict[str, Any], path: Path) -> None:
    if ckpt["format"] >= 2 and ckpt["digest"] != content_digest(ckpt):
        raise _damaged(path, "does not match its content digest (bytes were changed)")


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """:func:`read_checkpoint`, then the config: it must rebuild valid config objects and a registered
    model of the checkpoint's task whose weights have the checkpoint's names and shapes. Every problem is
    a one-line CheckpointError."""
    path = Path(path)
    ckpt = _read(path, map_location)
    model_cfg = _validate_config(ckpt["config"], path)
    spec = get_spec(model_cfg.name)
    if ckpt["task"] != spec.task:
        raise CheckpointError(f"{path} is a {ckpt['task']!r} checkpoint but model {model_cfg.name!r} solves "
                              f"{spec.task!r}; the checkpoint is damaged or foreign")
    _validate_fit(ckpt["model"], model_cfg, path)
    _check_digest(ckpt, path)  # last: a foreign checkpoint is better named by the checks above
    return ckpt


def _damaged(path: Path, problem: str) -> CheckpointError:
    return CheckpointError(f"{path} {problem}; the checkpoint is damaged or foreign, use another one or train again")


def _validate_config(config: Any, path: Path) -> ModelConfig:
    """The config dicts must rebuild valid ModelConfig, TrainConfig and DataConfig objects."""
    if not isinstance(config, dict) or not config:
        raise _damaged(path, "has an empty or malformed config")
    for section in ("model", "train", "data"):
        if not isinstance(config.get(section), dict):
            raise _damaged(path, f"has no {section!r} section in its config")
    data = {k: v for k, v in config["data"].items() if k != "checksum"}
    for key in ("path", "dataset"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise _damaged(path, f"has a non-text data {key} {data[key]!r} in its config")
    try:
        model_cfg = from_dict(ModelConfig, config["model"])
        if not isinstance(model_cfg.name, str):
            raise TypeError("model name is not text")
        get_spec(model_cfg.name)
        from_dict(TrainConfig, config["train"])
        from_dict(DataConfig, data)
    except Exception as exc:  # ConfigError, or TypeError for a value of the wrong type
        raise _damaged(path, f"has an invalid config ({_one_line(exc)})") from None
    return model_cfg


def _validate_state(state: Any, path: Path) -> None:
    if not isinstance(state, dict):
        raise _damaged(path, "has a malformed training state")
    for key, low in STATE_INTS.items():
        value = state.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise _damaged(path, f"has a training state whose {key} is {value!r}, not an integer >= {low}")
    for key in STATE_FLOATS:
        value = state.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value) or value < 0 \
                or (key != "best_val" and math.isinf(value)) or (key == "lr" and value == 0):
            raise _damaged(path, f"has a training state whose {key} is {value!r}")
    history = state.get("history")
    if not isinstance(history, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                for v in history):
        raise _damaged(path, "has a training state whose history is not a list of numbers")


def _validate_weights(weights: Any, path: Path) -> None:
    if not isinstance(weights, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in weights.items()):
        raise _damaged(path, "has malformed model weights")
    for key, t in weights.items():
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            raise _damaged(path, f"holds NaN or infinite values in weight {key!r}")


def _validate_optimizer(opt: Any, path: Path) -> None:
    if opt is None:
        return
    if not (isinstance(opt, dict) and isinstance(opt.get("state"), dict) and isinstance(opt.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in opt["param_groups"])):
        raise _damaged(path, "has a malformed optimizer state")


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

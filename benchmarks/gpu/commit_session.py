"""Put what a device session returned (session.py's OUT) into the repository, trusting none of it.

    python benchmarks/gpu/commit_session.py RETURNED [--campaigns campaigns] [--pretrained swarmctl/pretrained]
        [--data-dir DIR] [--clustering-data FILE] [--subset N] [--keep-shipped]
    make campaign-commit FROM=RETURNED [COMMIT_OPTS="--data-dir DIR"]   # the same, then git add + commit

What goes where: NAME.tgz's progress.json becomes campaigns/NAME/progress.json; an image campaign's
NAME-last.pt and NAME-best.pt become campaigns/NAME/last.pt and best.pt, with config.json, metrics.jsonl,
eval-test.json, curves.png and samples.png beside them (a metrics, evaluation, curves or samples file that
did not come back is removed: it described the old checkpoint); finished clustering and MoG runs go to
campaigns/NAME/runs/RUN/ (config, metrics, evaluation, curves; SWARM's weights.pt). A session that
measured step timings writes campaigns/timing.json, and every session adds a line to
campaigns/sessions.jsonl holding the SHA-256 of its session.json: a session already recorded is refused.

Everything is checked before anything changes:
- the returned folder: session.json, NAME.tgz and NAME-{last,best}.pt are regular files, never links; NAME
  is one of campaign.NAMES (checkpoints: an image campaign's, with its archive); other files (logs) are not read;
- each archive: a gzip tar of regular files and folders only, every member inside NAME/, relative, without
  '.', '..', control characters or duplicates, within size limits; only the files named above are taken;
- every JSON file: parsed strictly (no NaN or Infinity), of the shape campaign.py writes and reads, numbers
  finite and in range; the returned progress.json continues the committed one (its sessions and finished
  runs begin with the committed ones) and agrees with the evaluations returned beside it;
- every checkpoint: loaded with swarmctl's load_checkpoint (digest, state, finite weights, config), of the
  campaign's task (and dataset), of the run its config.json describes, its weights loaded with strict=True
  into the model that config.json builds; last.pt has its Adam state (loaded into Adam) and continues the
  committed last.pt.

Shipped models (swarmctl/pretrained/). A candidate (an image campaign's best.pt, a finished clustering run's
weights.pt) meets the record of the same model and code (and dataset and model config where the record holds
them). It replaces that shipped model only when
 1. its returned number beats the recorded one (when the record's data checksum differs from the run's, the
    numbers are on other data and this step is skipped; 3 is then required);
 2. this script's own evaluation of it, on the CPU, on a fixed subset of the split the number is on (the
    first --subset items of a seed-0 permutation: by default all 1,000 tasks of the clustering validation
    split, 500 of the 10,000 test images) agrees with the returned number: within 4 standard errors of the
    subset's own per-item losses, with the finite-population correction (the whole split leaves only a
    0.1 % allowance for rounding; TF32 on the card changes these losses in the fifth decimal,
    benchmarks/RESULTS.md);
 3. on the same items it scores lower than the shipped weights (when the shipped .pt exists; a record
    without its weights has only its number, and one of other data without its weights stays).
A candidate that fails 2 reports a false number: the whole commit is refused. One that fails 3 is committed
to its campaign and the shipped model stays. The data for 2 must be the data the run was trained on (the
same content checksum): clustering, --clustering-data FILE, else the file the run's config names (absolute,
or relative to the repository), else data/clustering-seed0.h5 (`swarmctl gen-data --seed 0`, about 30 s);
images, --data-dir DIR, else the run's data folder, else datasets/ (torchvision's layout). When none is
there the commit is refused with one line saying what to provide; --keep-shipped commits the session
without re-evaluating or replacing any shipped model.

All or nothing: the files are staged in temporary folders beside campaigns/ and beside the shipped models,
then moved into place one by one; a failure on the way moves every replaced file back. A refusal is one
line on stderr and exit 1, and leaves campaigns/ and the shipped models as they were.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import stat
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from campaign import IMAGES, NAMES  # noqa: E402

from swarmctl import create_model  # noqa: E402
from swarmctl.config import DataConfig, ModelConfig, from_dict  # noqa: E402
from swarmctl.data.dataset import bucketed_batches  # noqa: E402
from swarmctl.data.hdf5 import read_dataset  # noqa: E402
from swarmctl.data.images import ImageBatches, ImageSet, load_images  # noqa: E402
from swarmctl.errors import SwarmctlError, describe_os_error  # noqa: E402
from swarmctl.models import get_spec, paper_code  # noqa: E402
from swarmctl.runs import RESUMABLE, export_weights, read_run_config  # noqa: E402
from swarmctl.tasks import get_task  # noqa: E402
from swarmctl.tasks.clustering import clustering_loss  # noqa: E402
from swarmctl.tasks.image import image_loss  # noqa: E402
from swarmctl.training.checkpoint import Checkpoint, load_checkpoint  # noqa: E402

IMAGE_FILES = ("config.json", "metrics.jsonl", "eval-test.json", "curves.png", "samples.png")
RUN_FILES = {"clustering": ("config.json", "metrics.jsonl", "eval-val.json", "curves.png", "weights.pt"),
             "mog": ("config.json", "metrics.jsonl", "eval-test.json", "curves.png")}
CHECKPOINTS = ("last.pt", "best.pt")
MAX_FILE = 256 << 20  # one returned file or archive member (a returned file holds at most 16 MiB)
MAX_UNPACKED = 1 << 30  # one archive, unpacked
MAX_MEMBERS = 10_000
MAX_JSON = 16 << 20
PNG = b"\x89PNG\r\n\x1a\n"
# items re-evaluated: the whole seed-0 validation split of 1,000 tasks (a few seconds per SWARM 192-10-1,
# so only the rounding allowance is left), 500 of the 10,000 test images (~35 s per swarm-image 256-10-1 on
# 2 CPU cores; 4 standard errors are then a few % of the loss)
SUBSET = {"clustering": 1000, "image": 500}
Z = 4.0  # standard errors the re-evaluation may differ by (a false refusal about once in 16,000)
RTOL = 1e-3  # rounding allowance, relative: the card's TF32 and the CPU agree to about 1e-5
TIMINGS = ("clustering_s_per_epoch", "mog_ms_per_step", "image_s_per_epoch")  # session.py picks modes from these


class Refused(Exception):
    """What cannot be trusted, as one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class NoData(Refused):
    """The data a re-evaluation needs is not here."""


# ---- small readers: JSON, numbers, files ---------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def _show(value: Any) -> str:
    """A returned value for a message: its repr, at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """Where in parsed JSON a NaN or infinite number is (json reads NaN, Infinity and 1e999), if anywhere."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key)
        if found is not None:
            return found
    return None


def parse_json(data: bytes, what: str) -> Any:
    """``data`` as strict JSON: UTF-8, and no NaN or infinite number anywhere."""
    try:
        value = json.loads(data.decode("utf-8"))
        found = _non_finite(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Refused(f"{what} is not valid JSON ({_one_line(exc)[:120]})") from None
    if found is not None:
        raise Refused(f"{what}: {found[0][:80] or 'the value'} is {found[1]}, not a finite number")
    return value


def _number(value: Any, what: str, low: float | None = None, positive: bool = False) -> float:
    """``value`` as a finite number (not a bool, not text), >= ``low`` or > 0."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
            or (low is not None and value < low) or (positive and value <= 0):
        rule = "> 0" if positive else f">= {low:g}" if low is not None else "finite"
        raise Refused(f"{what} is {_show(value)}, not a number {rule}")
    return float(value)


def _integer(value: Any, what: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise Refused(f"{what} is {_show(value)}, not an integer >= {low}")
    return value


def _text(value: Any, what: str, limit: int = 500) -> str:
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        raise Refused(f"{what} is {_show(value)}, not a line of text")
    return value


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _open_returned(path: Path, what: str) -> int:
    """A descriptor of the regular file ``path``, opened without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{what} is a symbolic link; a returned file must be the file itself") from None
        raise Refused(describe_os_error(exc)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"larger than {MAX_FILE >> 20} MiB"
        raise Refused(f"{what} is {why}")
    os.set_blocking(fd, True)
    return fd


def _read_returned(path: Path, what: str, limit: int = MAX_JSON) -> bytes:
    with os.fdopen(_open_returned(path, what), "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"{what} is larger than {limit >> 20} MiB")
    return data


def _copy_returned(path: Path, dest: Path, what: str) -> None:
    with os.fdopen(_open_returned(path, what), "rb") as src, open(dest, "xb") as out:
        shutil.copyfileobj(src, out)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@contextlib.contextmanager
def _untrusted(what: str) -> Iterator[None]:
    """Checking returned content: whatever it makes a reader raise means it is not trusted (one line,
    not a traceback). Refusals pass through as they are."""
    try:
        yield
    except Refused:
        raise
    except SwarmctlError as exc:
        raise Refused(f"{what}: {_one_line(exc)}") from None
    except Exception as exc:
        raise Refused(f"{what} could not be checked ({type(exc).__name__}: {_one_line(exc)[:150]})") from None


# ---- the returned folder and session.json ------------------------------------------------------------------

@dataclass
class Returned:
    session_bytes: bytes
    archives: dict[str, Path]  # campaign -> NAME.tgz
    checkpoints: dict[str, dict[str, Path]]  # image campaign -> {"last.pt": NAME-last.pt, "best.pt": ...}


def _campaign_of(file: str, campaign: str, known: tuple[str, ...]) -> str:
    if campaign not in known:
        raise Refused(f"{file}: unknown campaign {campaign!r}; the campaigns are {', '.join(known)}")
    return campaign


def scan_returned(folder: Path) -> Returned:
    """The returned folder's session.json, archives and checkpoints, each a regular file (not a link)."""
    if not folder.is_dir():
        raise Refused(f"{folder} is not a folder; pass the folder session.py wrote (its OUT)")
    session, archives, checkpoints = None, {}, {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name, path = entry.name, Path(entry.path)
        if name != "session.json" and not name.endswith((".tgz", ".pt")):
            continue  # logs: never read
        if entry.is_symlink():
            raise Refused(f"{name} is a symbolic link; a returned file must be the file itself")
        if name == "session.json":
            session = _read_returned(path, name)
        elif name.endswith(".tgz"):
            archives[_campaign_of(name, name[: -len(".tgz")], NAMES)] = path
        else:
            campaign, _, which = name[: -len(".pt")].rpartition("-")
            if which not in ("last", "best"):
                raise Refused(f"{name}: unexpected checkpoint; only an image campaign's NAME-last.pt and "
                              f"NAME-best.pt come back ({', '.join(IMAGES)})")
            checkpoints.setdefault(_campaign_of(name, campaign, IMAGES), {})[f"{which}.pt"] = path
    if session is None:
        raise Refused(f"{folder}: no session.json; pass the folder session.py wrote (its OUT)")
    for campaign in checkpoints:
        if campaign not in archives:
            raise Refused(f"{campaign}-*.pt came back without {campaign}.tgz (its config and progress)")
    return Returned(session, archives, checkpoints)


def check_session(raw: bytes) -> dict[str, Any]:
    """session.json: the facts a session recorded, of the types session.py writes."""
    s = parse_json(raw, "session.json")
    if not isinstance(s, dict):
        raise Refused("session.json is not a JSON object")
    _text(s.get("card"), "session.json card")
    if "wall" in s:
        _number(s["wall"], "session.json wall", low=0)
    if not isinstance(s.get("plan", []), list):
        raise Refused(f"session.json plan is {_show(s['plan'])}, not a list")
    for step in s.get("plan", []):
        if not isinstance(step, dict) or step.get("campaign") not in NAMES:
            raise Refused(f"session.json plan holds {_show(step)}, not a campaign of {', '.join(NAMES)}")
        _number(step.get("gap"), f"session.json plan gap of {step['campaign']}")
    flags = s.get("flags", {})
    if not isinstance(flags, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                              for v in flags.values()):
        raise Refused(f"session.json flags is {_show(flags)}, not lists of options")
    seconds = s.get("seconds", {})
    if not isinstance(seconds, dict):
        raise Refused(f"session.json seconds is {_show(seconds)}, not an object")
    for name, value in seconds.items():
        _campaign_of("session.json seconds", name, NAMES)
        _number(value, f"session.json seconds of {name}")
    if not isinstance(s.get("timing_measured", False), bool):
        raise Refused(f"session.json timing_measured is {_show(s['timing_measured'])}, not true or false")
    timing = s.get("timing", {})
    if not isinstance(timing, dict):
        raise Refused(f"session.json timing is {_show(timing)}, not an object")
    for key in TIMINGS:
        modes = timing.get(key, {})
        if not isinstance(modes, dict):
            raise Refused(f"session.json timing {key} is {_show(modes)}, not an object")
        for mode, value in modes.items():
            _number(value, f"session.json timing {key} {mode}", positive=True)
    exit_code = s.get("gpu_tests_exit")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
        raise Refused(f"session.json gpu_tests_exit is {_show(exit_code)}, not an exit code")
    return s


def committed_sessions(root: Path) -> set[str]:
    """The session.json digests campaigns/sessions.jsonl records."""
    path = root / "sessions.jsonl"
    if not os.path.lexists(path):
        return set()
    _check_committed_file(path)
    found = set()
    for number, record in _json_lines(path):
        if record is None:
            raise Refused(f"{path} line {number} is not JSON; repair it (git checkout {path}) first")
        if isinstance(record, dict) and isinstance(record.get("session_sha256"), str):
            found.add(record["session_sha256"])
    return found


def _check_committed_file(path: Path) -> None:
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise Refused(f"{path} is not a regular file (a link or special file); restore it first")


# ---- archives ------------------------------------------------------------------------------------------

def _member_path(raw: str, name: str, what: str) -> PurePosixPath:
    """A member's path, which must be NAME/... relative and plain."""
    text = raw.rstrip("/") if raw.endswith("/") else raw
    parts = text.split("/")
    if not text or text.startswith("/") or "\\" in text or any(p in ("", ".", "..") for p in parts) \
            or not text.isprintable():
        raise Refused(f"{what}: member {raw!r} is not a plain relative path inside {name}/")
    if parts[0] != name:
        raise Refused(f"{what}: member {raw!r} is outside its folder {name}/")
    if len(parts) > 4 or any(len(p.encode()) > 255 for p in parts):
        raise Refused(f"{what}: member {raw[:80]!r} is deeper or longer than anything a session writes")
    return PurePosixPath(*parts)


_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.FIFOTYPE: "a FIFO",
          tarfile.CHRTYPE: "a device", tarfile.BLKTYPE: "a device"}


def unpack(archive: Path, name: str, dest: Path) -> None:
    """Unpack NAME.tgz into ``dest``/NAME after checking each member: regular files and folders only,
    inside NAME/, no duplicates, within the size limits. Nothing is extracted by tarfile itself."""
    what = archive.name
    seen: set[PurePosixPath] = set()
    total = 0
    try:
        with os.fdopen(_open_returned(archive, what), "rb") as fh, tarfile.open(fileobj=fh, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise Refused(f"{what} holds more than {MAX_MEMBERS:,} members")
                rel = _member_path(member.name, name, what)
                if rel in seen:
                    raise Refused(f"{what}: member {member.name!r} appears twice")
                seen.add(rel)
                target = dest.joinpath(*rel.parts)
                if member.type == tarfile.DIRTYPE:
                    _make_member_folder(target, what, member.name)
                elif member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    total += member.size
                    if member.size > MAX_FILE or total > MAX_UNPACKED:
                        raise Refused(f"{what} unpacks to more than the limits ({MAX_FILE >> 20} MiB a file, "
                                      f"{MAX_UNPACKED >> 30} GiB in all)")
                    _make_member_folder(target.parent, what, member.name)
                    source = tar.extractfile(member)
                    try:
                        with open(target, "xb") as out:
                            shutil.copyfileobj(source, out)
                    except (FileExistsError, IsADirectoryError, NotADirectoryError):
                        raise Refused(f"{what}: member {member.name!r} clashes with a folder or file") from None
                else:
                    kind = _KINDS.get(member.type, f"of tar type {member.type!r}")
                    raise Refused(f"{what}: member {member.name!r} is {kind}; only regular files and folders "
                                  "are taken")
    except Refused:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise Refused(f"{what} is not a readable gzip tar archive ({type(exc).__name__}: "
                      f"{_one_line(exc)[:100]})") from None


def _make_member_folder(folder: Path, what: str, member: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Refused(f"{what}: member {member!r} clashes with a file of the same name") from None


# ---- campaigns -------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """A returned checkpoint that may replace a shipped model."""

    campaign: str
    label: str  # in messages, e.g. "mnist-best.pt"
    weights: Path  # the staged checkpoint
    ckpt: Checkpoint
    config: dict[str, Any]
    scored: dict[str, Any]  # its returned evaluation (checked)
    metric: str  # the record's number: bits_per_dim or loss (lower is better)
    source: dict[str, Any]  # for the record: where it came from


@dataclass
class Campaign:
    """What one campaign's archive brings, checked: files by their path in campaigns/NAME (None: remove)."""

    name: str
    files: dict[str, Path | None] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def committed_progress(root: Path, name: str) -> dict[str, Any]:
    path = root / name / "progress.json"
    if not os.path.lexists(path):
        return {"campaign": name, "sessions": []}
    _check_committed_file(path)
    try:
        progress = json.loads(path.read_bytes())
        if not isinstance(progress, dict) or not isinstance(progress.get("sessions", []), list):
            raise ValueError("not a progress record")
    except ValueError as exc:
        raise Refused(f"{path} is damaged ({_one_line(exc)[:80]}); restore it (git checkout {path}) first") from None
    return progress


POSITIVE = ("best_bits_per_dim", "start_bits_per_dim", "target_bits_per_dim", "minutes_per_run")
FINITE = ("best_log_likelihood", "start_log_likelihood", "target_log_likelihood")


def check_progress(name: str, new: Any, old: dict[str, Any]) -> list[dict[str, Any]]:
    """The returned progress.json of campaign ``name``: the numbers campaign.py reads, in range; its
    sessions begin with the committed ones. Returns the sessions it adds."""
    what = f"{name}/progress.json"
    if not isinstance(new, dict):
        raise Refused(f"{what} is not a JSON object")
    if new.get("campaign") != name:
        raise Refused(f"{what} is the progress of campaign {_show(new.get('campaign'))}, not {name!r}")
    sessions = new.get("sessions")
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise Refused(f"{what}: sessions is {_show(sessions)}, not a list of records")
    for key in POSITIVE:
        if key in new:
            _number(new[key], f"{what}: {key}", positive=True)
    for key in FINITE:
        if key in new:
            _number(new[key], f"{what}: {key}")
    if "net_minutes" in new:
        _number(new["net_minutes"], f"{what}: net_minutes", low=0)
    if "epochs" in new:
        _integer(new["epochs"], f"{what}: epochs")
    if "side_by_side" in new:
        _integer(new["side_by_side"], f"{what}: side_by_side", low=1)
    before = old.get("sessions", [])
    if sessions[: len(before)] != before:
        raise Refused(f"{what} does not continue campaigns/{name}/progress.json (its first {len(before)} sessions "
                      "differ): the session started from other campaigns than the committed ones")
    for record in sessions[len(before):]:
        for key in ("date", "card"):
            if key in record:
                _text(record[key], f"{what}: a session's {key}")
    return sessions[len(before):]


def _run_config(folder: Path, what: str) -> dict[str, Any]:
    """folder/config.json: strict JSON and a valid swarmctl run config."""
    config = parse_json((folder / "config.json").read_bytes(), what)
    with _untrusted(what):
        read_run_config(folder)
    run = config.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("name"), str) or not isinstance(run.get("code"), str):
        raise Refused(f"{what} has no run name and code")
    model_cfg = from_dict(ModelConfig, config["model"])
    if run["code"] != paper_code(model_cfg):
        raise Refused(f"{what} names code {_show(run['code'])} for a {paper_code(model_cfg)} model")
    return config


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two run configs describe the same run: model, data and every train option a resume cannot change."""
    def fixed(c: dict[str, Any]) -> Any:
        return c.get("model"), c.get("data"), {k: v for k, v in c.get("train", {}).items() if k not in RESUMABLE}
    return fixed(a) == fixed(b)


def _build(config: dict[str, Any]) -> torch.nn.Module:
    return create_model(from_dict(ModelConfig, config["model"]))


def check_checkpoint(path: Path, label: str, config: dict[str, Any], task: str) -> Checkpoint:
    """A returned checkpoint: valid for load_checkpoint, of ``task``, of the run ``config`` describes, its
    weights loaded with strict=True into the model ``config`` builds."""
    try:
        ckpt = load_checkpoint(path)
    except SwarmctlError as exc:
        raise Refused(f"{label}: {_one_line(exc).replace(str(path), 'the file')}") from None
    if ckpt.task != task:
        raise Refused(f"{label} is a checkpoint of task {ckpt.task!r}, not {task!r}")
    if not _same_run(ckpt.config, config):
        raise Refused(f"{label} is not of the run its config.json describes ({ckpt.config['model'].get('name')} "
                      f"{ckpt.config.get('run', {}).get('code')} against {config['model']['name']} "
                      f"{config['run']['code']}, or other data or options)")
    with _untrusted(f"{label} in the model its config.json builds"):
        _build(config).load_state_dict(ckpt.model, strict=True)
    return ckpt


def _check_adam(ckpt: Checkpoint, config: dict[str, Any], label: str) -> None:
    """last.pt's optimizer state loads into Adam over the model's parameters, each moment of its shape."""
    if ckpt.optimizer is None:
        raise Refused(f"{label} holds no optimizer state; the next session cannot resume from it")
    with _untrusted(f"{label}'s optimizer state"):
        model = _build(config)
        opt = torch.optim.Adam(model.parameters(), lr=ckpt.state.lr)
        opt.load_state_dict(ckpt.optimizer)
        for p in model.parameters():
            for key, value in opt.state.get(p, {}).items():
                moment = key in ("exp_avg", "exp_avg_sq")
                if moment and (value.shape != p.shape or not bool(torch.isfinite(value).all())):
                    raise Refused(f"{label}'s optimizer state does not fit the model (moment {key})")


def check_eval(path: Path, label: str, config: dict[str, Any], split: str, keys: tuple[str, ...],
               ckpt: Checkpoint | None = None, low: float | None = 0) -> dict[str, Any]:
    """A returned evaluation: of this model, on ``split``, its ``keys`` finite (>= ``low``), of ``ckpt``'s
    best epoch."""
    res = parse_json(path.read_bytes(), label)
    if not isinstance(res, dict):
        raise Refused(f"{label} is not a JSON object")
    if res.get("split") != split:
        raise Refused(f"{label} scores split {_show(res.get('split'))}, not {split!r}")
    for key in keys:
        _number(res.get(key), f"{label}: {key}", low=low)
    if "model" in res and (res.get("model"), res.get("code")) != (config["model"]["name"], config["run"]["code"]):
        raise Refused(f"{label} scores {_show(res.get('model'))} {_show(res.get('code'))}, not the run's model")
    _integer(res.get("tasks"), f"{label}: tasks", low=1)
    if ckpt is not None:
        if _integer(res.get("epoch"), f"{label}: epoch") != ckpt.state.best_epoch:
            raise Refused(f"{label} scores epoch {res['epoch']}, not the checkpoint's best epoch "
                          f"{ckpt.state.best_epoch}")
    return res


def _json_lines(path: Path):
    """(line number, the line's JSON value or None when it is not JSON) for every non-blank line."""
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            yield number, None


def _check_metrics(path: Path, label: str) -> None:
    for number, record in _json_lines(path):
        if not isinstance(record, dict) or not isinstance(record.get("epoch"), int) or isinstance(record["epoch"],
                                                                                                   bool):
            raise Refused(f"{label} line {number} is not a metrics record")


def _check_png(path: Path, label: str) -> None:
    with open(path, "rb") as fh:
        if fh.read(len(PNG)) != PNG:
            raise Refused(f"{label} is not a PNG image")


def _check_extras(folder: Path, prefix: str, names: tuple[str, ...]) -> None:
    for file in names:
        path = folder / file
        if file.endswith(".png") and path.is_file():
            _check_png(path, f"{prefix}/{file}")
        elif file == "metrics.jsonl" and path.is_file():
            _check_metrics(path, f"{prefix}/{file}")


def _expect_best(what: str, progress: dict[str, Any], key: str, old: Any, new: Any, better: Callable) -> None:
    """``progress[key]`` is the better of the committed best and this session's number."""
    values = [v for v in (old, new) if isinstance(v, int | float) and not isinstance(v, bool)]
    want = better(values) if values else None
    got = progress.get(key)
    if (want is None) != (got is None) or (want is not None and not _same(got, want)):
        raise Refused(f"{what}: {key} is {_show(got)}, but the committed best and this session's evaluation "
                      f"give {_show(want)}")


def check_image(name: str, folder: Path, pts: dict[str, Path], root: Path, progress: dict[str, Any],
                added: list[dict[str, Any]], old: dict[str, Any], base: dict[str, Any]) -> Campaign:
    """An image campaign: its checkpoints with config.json, evaluation, metrics and pictures."""
    out = Campaign(name)
    bits = added[-1].get("test_bits_per_dim") if added else None
    if not pts:  # training failed: no evaluation either
        if bits is not None:
            raise Refused(f"{name}/progress.json records test_bits_per_dim {_show(bits)}, but no checkpoint came back")
        _expect_best(f"{name}/progress.json", progress, "best_bits_per_dim", old.get("best_bits_per_dim"), None, min)
        if any((folder / f).exists() for f in IMAGE_FILES):
            out.notes.append(f"{name}: no checkpoints came back; only its progress is committed")
        return out
    missing = [p for p in CHECKPOINTS if p not in pts]
    if missing:
        raise Refused(f"{name}-{missing[0]} did not come back with {name}-{[p for p in pts][0]}; both or neither")
    if not (folder / "config.json").is_file():
        raise Refused(f"{name}.tgz has no config.json for {name}-last.pt and {name}-best.pt")
    config = _run_config(folder, f"{name}/config.json")
    model_cfg = from_dict(ModelConfig, config["model"])
    if get_spec(model_cfg.name).task != "image" or model_cfg.dataset != name:
        raise Refused(f"{name}/config.json is a {model_cfg.name} run on {model_cfg.dataset}, not an image model "
                      f"of {name}")
    last = check_checkpoint(pts["last.pt"], f"{name}-last.pt", config, "image")
    best = check_checkpoint(pts["best.pt"], f"{name}-best.pt", config, "image")
    _check_adam(last, config, f"{name}-last.pt")
    committed = root / name / "last.pt"
    if os.path.lexists(committed):
        _check_committed_file(committed)
        try:
            before = load_checkpoint(committed)
        except SwarmctlError as exc:
            raise Refused(f"{committed} is damaged ({_one_line(exc)[:100]}); restore it first") from None
        if not _same_run(before.config, config):
            raise Refused(f"{name}-last.pt is not the run {committed} holds; the session did not continue it")
        if last.state.epoch < before.state.epoch:
            raise Refused(f"{name}-last.pt is at epoch {last.state.epoch}, behind the committed "
                          f"{before.state.epoch}")
    _check_extras(folder, name, IMAGE_FILES)
    scored = None
    if (folder / "eval-test.json").is_file():
        scored = check_eval(folder / "eval-test.json", f"{name}/eval-test.json", config, "test",
                            ("loss", "bits_per_dim"), best)
        if not math.isclose(scored["bits_per_dim"], scored["loss"] / math.log(2), rel_tol=1e-6):
            raise Refused(f"{name}/eval-test.json: bits_per_dim {scored['bits_per_dim']} is not its loss "
                          f"{scored['loss']} in bits")
    if bits is not None:
        _number(bits, f"{name}/progress.json: test_bits_per_dim", positive=True)
        if scored is None or not _same(bits, scored["bits_per_dim"]):
            raise Refused(f"{name}/progress.json: test_bits_per_dim {bits} is not what eval-test.json holds")
    _expect_best(f"{name}/progress.json", progress, "best_bits_per_dim", old.get("best_bits_per_dim"), bits, min)
    out.files.update({"config.json": folder / "config.json", "last.pt": pts["last.pt"], "best.pt": pts["best.pt"]})
    for file in IMAGE_FILES[1:]:  # one that did not come back described the old checkpoint
        out.files[file] = folder / file if (folder / file).is_file() else None
    if scored is not None:
        out.candidates.append(Candidate(name, f"{name}-best.pt", pts["best.pt"], best, config, scored, "bits_per_dim",
                                        {**base, "net_minutes": progress.get("net_minutes"),
                                         "epochs": progress.get("epochs")}))
    return out


def _returned_runs(folder: Path, name: str) -> list[str]:
    runs = folder / "runs"
    if not runs.is_dir():
        return []
    found = []
    for path in sorted(runs.iterdir()):
        if not path.is_dir():
            raise Refused(f"{name}.tgz: runs/{path.name} is a file, not a run folder")
        found.append(path.name)
    return found


def _new_run_folder(root: Path, name: str, run: str) -> None:
    if os.path.lexists(root / name / "runs" / run):
        raise Refused(f"{name}.tgz brings run {run!r}, which campaigns/{name}/runs/ already holds; the session "
                      "would replace a committed run")


def check_clustering(folder: Path, root: Path, progress: dict[str, Any], old: dict[str, Any],
                     base: dict[str, Any]) -> Campaign:
    """The clustering campaign: its finished runs, each recorded in progress.json with its evaluation."""
    out, what = Campaign("clustering"), "clustering/progress.json"
    runs = progress.get("runs", {})
    if not isinstance(runs, dict):
        raise Refused(f"{what}: runs is {_show(runs)}, not an object")
    for run, entry in runs.items():
        where = f"{what}: run {run[:60]!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str) \
                or not isinstance(entry.get("code"), str):
            raise Refused(f"{where} is not a run record (model, code, seed, eval_loss)")
        _integer(entry.get("seed"), f"{where} seed")
        _number(entry.get("eval_loss"), f"{where} eval_loss", low=0)
        for key in ("epochs",):
            if key in entry:
                _integer(entry[key], f"{where} {key}")
        for key in ("net_minutes", "median_epoch_s"):
            if entry.get(key) is not None:
                _number(entry[key], f"{where} {key}", low=0)
    committed = old.get("runs", {}) if isinstance(old.get("runs"), dict) else {}
    for run, entry in committed.items():
        if runs.get(run) != entry:
            raise Refused(f"{what} drops or changes the committed run {run!r}")
    new_runs = sorted(set(runs) - set(committed))
    returned = _returned_runs(folder, "clustering")
    if returned != new_runs:
        raise Refused(f"{what} records new runs {new_runs} but clustering.tgz brings {returned}")
    for record in progress.get("sessions", [])[len(old.get("sessions", [])):]:
        if not set(record.get("runs", [])) <= set(new_runs):
            raise Refused(f"{what}: a session lists runs it did not bring back")
    for run in returned:
        _new_run_folder(root, "clustering", run)
        run_dir, prefix = folder / "runs" / run, f"clustering/runs/{run}"
        if not (run_dir / "config.json").is_file() or not (run_dir / "eval-val.json").is_file():
            raise Refused(f"{prefix}: a finished run needs its config.json and eval-val.json")
        config = _run_config(run_dir, f"{prefix}/config.json")
        model_cfg, entry = from_dict(ModelConfig, config["model"]), runs[run]
        if config["run"]["name"] != run or get_spec(model_cfg.name).task != "clustering":
            raise Refused(f"{prefix}/config.json is run {_show(config['run']['name'])} of {model_cfg.name}, not a "
                          f"clustering run {run!r}")
        if entry["model"] != model_cfg.name or entry["seed"] != config["train"].get("seed"):
            raise Refused(f"{what}: run {run!r} is recorded as {entry['model']} seed {entry['seed']}, its config "
                          f"says {model_cfg.name} seed {config['train'].get('seed')}")
        weights = None
        if (run_dir / "weights.pt").is_file():
            weights = check_checkpoint(run_dir / "weights.pt", f"{prefix}/weights.pt", config, "clustering")
        scored = check_eval(run_dir / "eval-val.json", f"{prefix}/eval-val.json", config, "val", ("loss",), weights)
        for key in ("accuracy", "oracle_accuracy"):
            if key in scored:
                _number(scored[key], f"{prefix}/eval-val.json: {key}", low=0)
        if not _same(entry["eval_loss"], scored["loss"]):
            raise Refused(f"{what}: run {run!r} has eval_loss {entry['eval_loss']}, its eval-val.json "
                          f"{scored['loss']}")
        _check_extras(run_dir, prefix, RUN_FILES["clustering"])
        out.files.update({f"runs/{run}/{f}": run_dir / f for f in RUN_FILES["clustering"] if (run_dir / f).is_file()})
        if weights is not None:
            out.candidates.append(Candidate("clustering", f"clustering run {run}", run_dir / "weights.pt", weights,
                                            config, scored, "loss",
                                            {**base, "net_minutes": entry.get("net_minutes"),
                                             "epochs": entry.get("epochs"), "run": run}))
    return out


def check_mog(folder: Path, root: Path, progress: dict[str, Any], added: list[dict[str, Any]],
              old: dict[str, Any]) -> Campaign:
    """The MoG campaign: the runs this session's records name, with their evaluation."""
    out, what = Campaign("mog"), "mog/progress.json"
    named = [r.get("run") for r in added if "run" in r]
    if not all(isinstance(n, str) for n in named):
        raise Refused(f"{what}: a session's run is not a run name")
    best = None
    for record in added:
        if record.get("test_log_likelihood") is not None:
            ll = _number(record["test_log_likelihood"], f"{what}: test_log_likelihood")
            best = ll if best is None else max(best, ll)
    for run in _returned_runs(folder, "mog"):
        run_dir, prefix = folder / "runs" / run, f"mog/runs/{run}"
        if run not in named:
            raise Refused(f"mog.tgz brings run {run!r}, which no session of {what} names")
        if not (run_dir / "config.json").is_file():
            out.notes.append(f"mog: run {run} came back without its config.json (training failed); not committed")
            continue
        _new_run_folder(root, "mog", run)
        config = _run_config(run_dir, f"{prefix}/config.json")
        if config["run"]["name"] != run or get_spec(config["model"]["name"]).task != "mog":
            raise Refused(f"{prefix}/config.json is not mog run {run!r}")
        if (run_dir / "eval-test.json").is_file():
            scored = check_eval(run_dir / "eval-test.json", f"{prefix}/eval-test.json", config, "test",
                                ("log_likelihood",), low=None)
            said = next((r.get("test_log_likelihood") for r in added if r.get("run") == run), None)
            if said is None or not _same(said, scored["log_likelihood"]):
                raise Refused(f"{what}: run {run!r} has test_log_likelihood {_show(said)}, its eval-test.json "
                              f"{scored['log_likelihood']}")
        _check_extras(run_dir, prefix, RUN_FILES["mog"])
        out.files.update({f"runs/{run}/{f}": run_dir / f for f in RUN_FILES["mog"] if (run_dir / f).is_file()})
    _expect_best(what, progress, "best_log_likelihood", old.get("best_log_likelihood"), best, max)
    return out


def check_campaign(name: str, unpacked: Path, pts: dict[str, Path], root: Path, base: dict[str, Any]) -> Campaign:
    """Campaign ``name``'s unpacked archive (and returned checkpoints), checked in full."""
    _check_destination(root / name / "progress.json", root)  # before any work: campaigns/NAME is a real folder
    folder = unpacked / name
    path = folder / "progress.json"
    if not path.is_file():
        if pts:
            raise Refused(f"{name}.tgz has no progress.json, but {name}-*.pt came back")
        return Campaign(name, notes=[f"{name}: its archive holds no progress.json (the campaign recorded nothing); "
                                     "nothing of it is committed"])
    progress = parse_json(path.read_bytes(), f"{name}/progress.json")
    old = committed_progress(root, name)
    added = check_progress(name, progress, old)
    last = added[-1] if added else {}
    base = {**base, "trained_on": f"{base['trained_on']}, campaign {name} (campaigns/{name})",
            "session": last.get("date")}
    if name == "clustering":
        out = check_clustering(folder, root, progress, old, base)
    elif name == "mog":
        out = check_mog(folder, root, progress, added, old)
    else:
        out = check_image(name, folder, pts, root, progress, added, old, base)
    out.files["progress.json"] = path
    return out


# ---- shipped models: match, re-evaluate, replace ------------------------------------------------------------

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
                "how": "benchmarks/gpu/commit_session.py, on the CPU, a seed-0 subset of the split"}


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


def _candidate_paths(config_path: Any, default: Path) -> list[Path]:
    """Where the data may be: the path a run's config names (absolute, or relative to the repository),
    then ``default``."""
    paths = []
    if isinstance(config_path, str) and config_path:
        p = Path(config_path)
        paths.append(p if p.is_absolute() else REPO / p)
    return list(dict.fromkeys([*paths, default]))


def clustering_items(cand: Candidate, explicit: Path | None) -> Any:
    """The validation split of the clustering file the run was trained on (its content checksum)."""
    want, tried = cand.config["data"].get("checksum"), []
    for path in [explicit] if explicit else _candidate_paths(cand.config["data"].get("path"),
                                                             REPO / "data" / "clustering-seed0.h5"):
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
                 f"here to re-evaluate it ({'; '.join(tried)}); make it with `swarmctl gen-data --seed 0` "
                 "(data/clustering-seed0.h5) or pass --clustering-data FILE")


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
    for root in [explicit] if explicit else _candidate_paths(data_cfg.path, REPO / "datasets"):
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
                 f"here to re-evaluate it ({'; '.join(tried)}); put torchvision's {dataset} files under datasets/ "
                 "or pass --data-dir DIR")


def subset(population: int, n: int) -> np.ndarray:
    """The fixed items re-evaluated: the first ``n`` of a seed-0 permutation, in order."""
    return np.sort(np.random.default_rng(0).permutation(population)[: min(n, population)])


@torch.no_grad()
def per_item_losses(model: torch.nn.Module, items: Any, task: str) -> torch.Tensor:
    """The task's loss of each item (a clustering task, an image), float64."""
    model.eval()
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


def reevaluate(cand: Candidate, shipped: Path | None, items: Any, n: int) -> Check:
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
    print(f"re-evaluating {cand.label} on {len(index)} of the {population} {split} items ...", flush=True)
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


def consider(cand: Candidate, pretrained: Path, opts: argparse.Namespace, notes: list[str]) -> Replacement | None:
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
        notes.append(f"{file} kept (--keep-shipped); {cand.label} reports {cand.metric} {new:.4f}, its record {old}")
        return None
    try:
        items = clustering_items(cand, opts.clustering_data) if cand.ckpt.task == "clustering" else \
            image_items(cand, opts.data_dir)
    except NoData as exc:
        raise Refused(f"{exc}; or pass --keep-shipped to commit the session without replacing it") from None
    check = reevaluate(cand, pretrained / file, items, opts.subset or SUBSET[cand.ckpt.task])
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


# ---- staging and moving into place ---------------------------------------------------------------------------

def _replace(src: Path, dest: Path) -> None:
    """One file into place (a test makes it fail)."""
    os.replace(src, dest)


def _check_destination(dest: Path, top: Path) -> None:
    """Every folder from ``top`` down to ``dest`` is a real folder (not a link) or missing, and ``dest`` is
    a regular file or missing."""
    for folder in [*reversed(dest.relative_to(top).parents[:-1])]:
        path = top / folder
        if os.path.lexists(path) and not stat.S_ISDIR(os.lstat(path).st_mode):
            raise Refused(f"{path} is a symbolic link or file, not a folder; commit_session writes only into "
                          "real folders")
    if os.path.lexists(dest) and not stat.S_ISREG(os.lstat(dest).st_mode):
        raise Refused(f"{dest} is a symbolic link or special file; commit_session never writes through one")


def _make_folders(folder: Path) -> list[Path]:
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)][::-1]
    for path in missing:
        path.mkdir()
    return missing


def place(plan: list[tuple[Path | None, Path, Path]]) -> None:
    """Move each staged file (None: remove) to its destination, keeping the replaced file in the backup
    folder (beside it, on its file system); on any failure put every file back and remove created folders."""
    done: list[tuple[Path, Path | None, list[Path]]] = []
    try:
        for src, dest, backups in plan:
            if src is None and not os.path.lexists(dest):
                continue  # nothing to remove
            created = _make_folders(dest.parent)
            backup = None
            if os.path.lexists(dest):
                backup = backups / f"{len(done)}-{dest.name}"
                if src is None:
                    os.replace(dest, backup)
                else:
                    try:
                        os.link(dest, backup)
                    except OSError:  # a file system without hard links
                        shutil.copy2(dest, backup)
            done.append((dest, backup, created))
            if src is not None:
                _replace(src, dest)
    except BaseException:
        for dest, backup, created in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, dest)
                else:
                    os.unlink(dest)
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    folder.rmdir()
        raise


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the campaigns folder itself (no lock file): one commit at a time."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another commit is writing {root}; wait for it to end") from None
        yield
    finally:
        os.close(fd)


def _staging(top: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{top.name}-commit-", dir=top.parent))


def commit(returned: Path, root: Path, pretrained: Path, opts: argparse.Namespace) -> list[str]:
    """Check everything ``returned`` holds, then put it into ``root`` (campaigns/) and ``pretrained`` all at
    once. Returns the lines to print; raises Refused (nothing changed) for anything it cannot trust."""
    found = scan_returned(returned)
    session = check_session(found.session_bytes)
    digest = hashlib.sha256(found.session_bytes).hexdigest()
    planned = {step["campaign"] for step in session.get("plan", [])}
    for name in found.archives:
        if "plan" in session and name not in planned:
            raise Refused(f"{name}.tgz came back, but session.json's plan has no campaign {name!r}")
    if not root.is_dir():
        raise Refused(f"{root} is not a folder; pass the repository's campaigns folder with --campaigns")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_locked(root))
        if digest in committed_sessions(root):
            raise Refused(f"the session in {returned} (session.json sha256 {digest[:12]}) is already committed in "
                          f"{root / 'sessions.jsonl'}")
        stage = _staging(root)
        stack.callback(shutil.rmtree, stage, ignore_errors=True)
        unpacked, copies, fresh, backups = (stage / d for d in ("unpacked", "returned", "new", "backup"))
        for folder in (unpacked, copies, fresh, backups):
            folder.mkdir()
        base = {"trained_on": session["card"], "command": "benchmarks/gpu/session.py (the campaign; see "
                "campaigns/README.md)", "session_sha256": digest}
        campaigns = []
        for name in sorted(found.archives):
            with _untrusted(f"{name}.tgz"):
                unpack(found.archives[name], name, unpacked)
                pts = {}
                for which, path in found.checkpoints.get(name, {}).items():
                    pts[which] = copies / f"{name}-{which}"
                    _copy_returned(path, pts[which], path.name)
                campaigns.append(check_campaign(name, unpacked, pts, root, base))
        notes = [n for c in campaigns for n in c.notes]
        replacements: dict[Path, Replacement] = {}
        considered: set[Path] = set()
        for cand in sorted((c for camp in campaigns for c in camp.candidates), key=lambda c: c.scored[c.metric]):
            with _untrusted(f"the re-evaluation of {cand.label}"):
                found_record = find_shipped(pretrained, cand)
                if found_record is None or found_record[0] in considered:
                    continue  # only the best candidate for each shipped model (they come best first)
                considered.add(found_record[0])
                chosen = consider(cand, pretrained, opts, notes)
            if chosen is not None:
                replacements[chosen.record_path] = chosen
        plan: list[tuple[Path | None, Path, Path]] = []
        for camp in campaigns:
            for rel, src in sorted(camp.files.items()):
                plan.append((src, root / camp.name / rel, backups))
        if session.get("timing_measured") and session.get("timing"):
            (fresh / "timing.json").write_text(json.dumps(session["timing"], indent=2) + "\n")
            plan.append((fresh / "timing.json", root / "timing.json", backups))
        lines = []
        if replacements:
            shipped_stage = _staging(pretrained)
            stack.callback(shutil.rmtree, shipped_stage, ignore_errors=True)
            (shipped_stage / "backup").mkdir()
            for rep in replacements.values():
                cand, file = rep.cand, rep.record["file"]
                keep = {k: rep.record[k] for k in ("paper",) if k in rep.record}
                scored = {k: v for k, v in cand.scored.items() if k != "checkpoint"}  # a path on the device machine
                export_weights(cand.weights, shipped_stage / file, data_path=_shipped_data_path(rep.record, cand),
                               record={**keep, **cand.source, "eval": scored, "commit_check": rep.check.record()})
                for staged in (shipped_stage / file, shipped_stage / Path(file).with_suffix(".json")):
                    plan.append((staged, pretrained / staged.name, shipped_stage / "backup"))
                other = "" if rep.same_data else ", on other data"
                lines.append(f"shipped model replaced: {file}: {cand.metric} {rep.old}{other} -> "
                             f"{cand.scored[cand.metric]} ({cand.label}; re-evaluated here on {rep.check.items} of "
                             f"{rep.check.of} {rep.check.split} items); update its row in {pretrained / 'README.md'}")
        log = root / "sessions.jsonl"
        old_log = log.read_bytes() if log.is_file() else b""
        entry = {k: session.get(k) for k in ("card", "wall", "plan", "flags", "seconds", "gpu_tests_exit")}
        (fresh / "sessions.jsonl").write_bytes(old_log + (json.dumps({**entry, "session_sha256": digest}) + "\n")
                                               .encode())
        plan.append((fresh / "sessions.jsonl", log, backups))  # last: the mark that the session is in
        for _, dest, _ in plan:
            _check_destination(dest, pretrained if dest.parent == pretrained else root)
        place(plan)
    changed = [c.name for c in campaigns if c.files]
    return [f"campaigns updated: {', '.join(changed) or 'none'}", *notes, *lines,
            f"session {digest[:12]} recorded in {root / 'sessions.jsonl'}"]


def _subset_size(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be >= 2, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("returned", type=Path, help="the folder a session's files came back to")
    ap.add_argument("--campaigns", type=Path, default=REPO / "campaigns")
    ap.add_argument("--pretrained", type=Path, default=REPO / "swarmctl" / "pretrained")
    ap.add_argument("--data-dir", type=Path, help="torchvision image files to re-evaluate an image candidate on "
                    "[default: the run's data folder, else datasets/]")
    ap.add_argument("--clustering-data", type=Path, help="the seed-0 clustering file to re-evaluate a clustering "
                    "candidate on [default: the run's file, else data/clustering-seed0.h5]")
    ap.add_argument("--subset", type=_subset_size, help="items a candidate is re-evaluated on [default: "
                    f"{SUBSET['clustering']} clustering tasks, {SUBSET['image']} test images]")
    ap.add_argument("--keep-shipped", action="store_true", help="commit the session without re-evaluating or "
                    "replacing any shipped model")
    opts = ap.parse_args(argv)
    try:
        lines = commit(opts.returned, opts.campaigns, opts.pretrained, opts)
    except Refused as exc:
        print(f"refused, nothing changed: {exc}", file=sys.stderr)
        return 1
    except SwarmctlError as exc:
        print(f"refused, nothing changed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"refused, nothing changed: {describe_os_error(exc)}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The commit's first step: what came back, read without trusting it. The returned folder's session.json,
archives and checkpoints (regular files, never links), each archive unpacked member by member after its
checks, and the small strict readers (JSON without NaN, numbers in range) every later step uses."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from swarmctl import files
from swarmctl.errors import DataError, SwarmctlError, describe_os_error
from swarmctl.rundir import CHECKPOINTS
from tools.campaigns import NO_CUDA, PROBES
from tools.campaigns.files import create_exclusive
from tools.campaigns.plan import IMAGES, LOGS, NAMES
from tools.campaigns.runners import MOG_RETURNED

SESSION = "session.json"  # the job's record, in OUT
MAX_FILE = 256 << 20  # one returned file or archive member (far above what a job may return)
MAX_UNPACKED = 1 << 30  # one archive, unpacked
MAX_MEMBERS = 10_000
MAX_JSON = 16 << 20
RETURNED_CHECKPOINTS = {Path(name).stem: name for name in CHECKPOINTS}  # NAME-best.pt -> best.pt, NAME-last.pt
PART = re.compile(r"(?P<stem>.+)\.part(?P<index>[0-9]+)")  # a returned part: NAME.partK (campaigns/parts.py)
TIMINGS = ("clustering_s_per_epoch", "mog_ms_per_step", "image_s_per_epoch")  # the job picks modes from these


class Refused(DataError):
    """What cannot be trusted, as one line (exit 1): the commit changed nothing."""

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
    """``data`` as strict JSON (UTF-8, no NaN or infinite number anywhere), read by the package's one reader;
    a refusal names where a non-finite number stands."""
    try:
        value = files.parse_json(data, what, finite=False)
    except DataError as exc:
        raise Refused(str(exc).removesuffix("; restore or replace it")) from None
    if (found := _non_finite(value)) is not None:
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
    with os.fdopen(_open_returned(path, what), "rb") as src, create_exclusive(dest) as out:
        shutil.copyfileobj(src, out)


@contextlib.contextmanager
def _untrusted(what: str, path: Path | None = None) -> Iterator[None]:
    """Checking returned content: whatever it makes a reader raise means it is not trusted (one line,
    not a traceback). Refusals pass through as they are. A reader's message names the returned file as
    ``what`` in place of ``path``, where the commit unpacked it."""
    try:
        yield
    except Refused:
        raise
    except SwarmctlError as exc:
        text = _one_line(exc) if path is None else _one_line(exc).replace(str(path), what)
        raise Refused(text if text.startswith(what) else f"{what}: {text}") from None
    except Exception as exc:
        raise Refused(f"{what} could not be checked ({type(exc).__name__}: {_one_line(exc)[:150]})") from None


# ---- the returned folder and session.json ------------------------------------------------------------------

@dataclass
class Returned:
    session_bytes: bytes
    archives: dict[str, Path]  # campaign -> NAME.tgz
    checkpoints: dict[str, dict[str, Path]]  # image campaign -> {"last.pt": NAME-last.pt, "best.pt": ...}
    parts: dict[str, Path] = field(default_factory=dict)  # mog-last.pt.partK -> its path (MoG's last.pt in parts)


def _campaign_of(file: str, campaign: str, known: tuple[str, ...]) -> str:
    if campaign not in known:
        raise Refused(f"{file}: unknown campaign {campaign!r}; the campaigns are {', '.join(known)}")
    return campaign


def scan_returned(folder: Path) -> Returned:
    """The returned folder's session.json, archives and checkpoints, each a regular file (not a link)."""
    if not folder.is_dir():
        raise Refused(f"{folder} is not a folder; pass the folder `python -m tools.campaigns run` wrote (its OUT)")
    session, archives, checkpoints, parts = None, {}, {}, {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name, path = entry.name, Path(entry.path)
        part = PART.fullmatch(name)
        if name == LOGS or (name != SESSION and not name.endswith((".tgz", ".pt")) and not part):
            continue  # logs: never read
        if entry.is_symlink():
            raise Refused(f"{name} is a symbolic link; a returned file must be the file itself")
        if part:
            if part["stem"] != MOG_RETURNED:
                raise Refused(f"{name}: unexpected part; only the MoG campaign's {MOG_RETURNED} comes back in parts")
            parts[name] = path
        elif name == SESSION:
            session = _read_returned(path, name)
        elif name.endswith(".tgz"):
            archives[_campaign_of(name, name[: -len(".tgz")], NAMES)] = path
        else:
            campaign, _, which = name[: -len(".pt")].rpartition("-")
            if which not in RETURNED_CHECKPOINTS:
                raise Refused(f"{name}: unexpected checkpoint; only an image campaign's NAME-last.pt and "
                              f"NAME-best.pt come back ({', '.join(IMAGES)})")
            checkpoints.setdefault(_campaign_of(name, campaign, IMAGES), {})[RETURNED_CHECKPOINTS[which]] = path
    if session is None:
        raise Refused(f"{folder}: no session.json; pass the folder `python -m tools.campaigns run` wrote (its OUT)")
    for campaign in checkpoints:
        if campaign not in archives:
            raise Refused(f"{campaign}-*.pt came back without {campaign}.tgz (its config and progress)")
    return Returned(session, archives, checkpoints, parts)


def check_session(raw: bytes) -> dict[str, Any]:
    """session.json: the facts a job recorded, of the types the job writes."""
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
    _check_probes(timing)
    if not isinstance(s.get("smoke", False), bool):
        raise Refused(f"session.json smoke is {_show(s['smoke'])}, not true or false")
    exit_code = s.get("gpu_tests_exit")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
        raise Refused(f"session.json gpu_tests_exit is {_show(exit_code)}, not an exit code")
    return s


def _check_probes(timing: dict[str, Any]) -> None:
    """The job's cold-compile probe and the ones it kept: objects of a known probe (a task, or TASK+amp) whose
    seconds are numbers (a compile killed by its cap says so in text, ">60")."""
    kept = timing.get("compile_probes", {})
    if not isinstance(kept, dict):
        raise Refused(f"session.json timing compile_probes is {_show(kept)}, not an object")
    found = [("compile_probe", timing["compile_probe"])] if "compile_probe" in timing else []
    for key, probe in [*found, *kept.items()]:
        if key != "compile_probe" and key not in PROBES[:-1]:
            raise Refused(f"session.json timing compile_probes has {_show(key)}, not one of {', '.join(PROBES[:-1])}")
        if not isinstance(probe, dict):
            raise Refused(f"session.json timing {key} is {_show(probe)}, not an object")
        if not isinstance(probe.get("finished", False), bool):
            raise Refused(f"session.json timing {key} finished is {_show(probe['finished'])}, not true or false")
        for name in ("compile_s", "warmup_s", "steady_ms_per_step", "steady_s_per_epoch"):
            value = probe.get(name)
            if value is not None and not (name == "compile_s" and isinstance(value, str) and len(value) < 20):
                _number(value, f"session.json timing {key} {name}", low=0)


def committed_sessions(root: Path) -> set[str]:
    """The session.json digests campaigns/sessions.jsonl records."""
    return {r["session_sha256"] for r in _session_records(root) if isinstance(r.get("session_sha256"), str)}


def card_sessions(root: Path) -> int:
    """How many sessions campaigns/sessions.jsonl records from a real job (not a ``--smoke`` one)."""
    return sum(1 for r in _session_records(root) if not is_smoke(r))


def is_smoke(session: dict[str, Any]) -> bool:
    """Whether a session (session.json or its line in sessions.jsonl) is a ``--smoke`` job's: it says so, or
    (written before it said so) its timings are a smoke run's or it ran without CUDA, which only a smoke
    job trains on."""
    timing = session.get("timing")
    return (session.get("smoke") is True or session.get("card") == NO_CUDA
            or (isinstance(timing, dict) and timing.get("smoke") is True))


def _session_records(root: Path) -> list[dict[str, Any]]:
    path = root / "sessions.jsonl"
    if not os.path.lexists(path):
        return []
    _check_committed_file(path)
    found = []
    for number, record in _json_lines(path):
        if record is None:
            raise Refused(f"{path} line {number} is not JSON; repair it (git checkout {path}) first")
        if isinstance(record, dict):
            found.append(record)
    return found


def _check_committed_file(path: Path) -> None:
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise Refused(f"{path} is not a regular file (a link or special file); restore it first")


def _json_lines(path: Path):
    """(line number, the line's JSON value or None when it is not JSON) for every non-blank line."""
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            yield number, None


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
                        with create_exclusive(target) as out:
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

"""A file in parts under a size limit, and the file again from its parts, checked.

A job with a wall-time limit returns files of a limited size (its ``file_mib`` argument); a checkpoint with its
optimizer state can be larger (swarm-mog 768-20-1: 57 MB). :func:`split` writes ``NAME.partK`` files of
at most ``limit`` bytes and a manifest ``NAME.parts.json`` (written last: a job stopped while splitting
leaves no manifest, so nothing half-split is taken); :func:`join` checks every part against the manifest
(its name, size and SHA-256, and the whole file's) before it writes the file again.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.errors import DataError
from swarmctl.files import atomic_write, atomic_write_text, read_bytes

MAX_PARTS = 64
MANIFEST_SUFFIX = ".parts.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Manifest:
    """What :func:`split` wrote: the file's name, size and digest, and its parts in order."""

    name: str
    size: int
    sha256: str
    parts: tuple[tuple[str, int, str], ...]  # (file name, size, sha256) of each part

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "size": self.size, "sha256": self.sha256,
                           "parts": [{"file": f, "size": s, "sha256": d} for f, s, d in self.parts]}, indent=2) + "\n"


def manifest_path(folder: Path, name: str) -> Path:
    return Path(folder) / f"{name}{MANIFEST_SUFFIX}"


def part_name(name: str, index: int) -> str:
    return f"{name}.part{index}"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith(MANIFEST_SUFFIX):
        raise DataError(f"{name!r} is not a plain file name (letters, digits, '.', '_', '-'); name the file plainly")
    return name


def split(path: Path, folder: Path, limit: int) -> Manifest:
    """Write ``path`` as parts of at most ``limit`` bytes into ``folder``, then its manifest."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    name = _check_name(Path(path).name)
    data = read_bytes(Path(path))
    count = max(1, math.ceil(len(data) / limit))
    if count > MAX_PARTS:
        raise DataError(f"{path} needs {count} parts of {limit:,} bytes, more than {MAX_PARTS}; raise the limit")
    parts = []
    for k in range(count):
        chunk = data[k * limit:(k + 1) * limit]
        atomic_write(Path(folder) / part_name(name, k), lambda fh, c=chunk: fh.write(c))
        parts.append((part_name(name, k), len(chunk), hashlib.sha256(chunk).hexdigest()))
    manifest = Manifest(name, len(data), hashlib.sha256(data).hexdigest(), tuple(parts))
    atomic_write_text(manifest_path(folder, name), manifest.to_json())
    return manifest


def read_manifest(path: Path) -> Manifest:
    """A manifest, checked in shape: plain part names in order, sizes and digests that add up."""
    try:
        raw: Any = json.loads(read_bytes(Path(path)).decode("utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path} is missing; the file's parts came back without their manifest") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise DataError(f"{path} is not valid JSON; the manifest is damaged") from None
    where = f"{path}"
    if not isinstance(raw, dict) or set(raw) != {"name", "size", "sha256", "parts"}:
        raise DataError(f"{where} does not hold name, size, sha256 and parts; the manifest is damaged")
    name = _check_name(raw["name"])
    if Path(path).name != f"{name}{MANIFEST_SUFFIX}":
        raise DataError(f"{where} describes {name!r}, not the file its own name says")
    parts = raw["parts"]
    if not isinstance(parts, list) or not 1 <= len(parts) <= MAX_PARTS:
        raise DataError(f"{where}: parts is not a list of 1 to {MAX_PARTS} entries; the manifest is damaged")
    found = []
    for k, part in enumerate(parts):
        if not isinstance(part, dict) or set(part) != {"file", "size", "sha256"} or part["file"] != part_name(name, k) \
                or not _is_size(part["size"]) or not _is_digest(part["sha256"]):
            raise DataError(f"{where}: part {k} is not {{file: {part_name(name, k)!r}, size, sha256}}; the manifest "
                            "is damaged")
        found.append((part["file"], part["size"], part["sha256"]))
    if not _is_size(raw["size"]) or not _is_digest(raw["sha256"]) or sum(s for _, s, _ in found) != raw["size"]:
        raise DataError(f"{where}: the file's size or digest is malformed, or its parts do not add up to it; "
                        "the manifest is damaged")
    return Manifest(name, raw["size"], raw["sha256"], tuple(found))


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def joined_bytes(manifest: Path) -> bytes:
    """The file the manifest describes, from the parts beside it, every part and the whole checked."""
    found = read_manifest(manifest)
    folder = Path(manifest).parent
    chunks = []
    for file, size, digest in found.parts:
        try:
            chunk = read_bytes(folder / file)
        except FileNotFoundError:
            raise DataError(f"{folder / file} is missing; every part of {found.name} must come back") from None
        if len(chunk) != size or hashlib.sha256(chunk).hexdigest() != digest:
            raise DataError(f"{folder / file} is not the part its manifest describes (size or SHA-256 differs); "
                            f"the parts of {found.name} are damaged")
        chunks.append(chunk)
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != found.sha256:
        raise DataError(f"the parts of {found.name} do not join into the file their manifest describes")
    return data


def join(manifest: Path, dest: Path) -> None:
    """Write the file the manifest describes to ``dest`` (atomically), once every part checks out."""
    data = joined_bytes(manifest)
    atomic_write(Path(dest), lambda fh: fh.write(data))

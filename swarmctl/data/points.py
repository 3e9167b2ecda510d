"""A user's point file for `swarmctl cluster`: CSV or whitespace text (header optional), .npy, .npz, HDF5
or standard input, read into one validated (N, D) float64 array; and the clustered points written back
as CSV."""

from __future__ import annotations

import csv
import io
import re
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import h5py
import numpy as np

from swarmctl.errors import ConfigError, DataError
from swarmctl.files import atomic_write

STDIN = "-"
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class PointSet:
    """Points read from a file: ``values`` (N, D) float64, all finite; ``names`` one per column."""

    values: np.ndarray
    names: tuple[str, ...]
    source: str  # the file as the user named it ("-" for standard input), with the key when there is one

    def __len__(self) -> int:
        return len(self.values)


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns`` as written: comma-separated names or 0-based indices, e.g. ``x,y`` or ``0,2``."""
    items = tuple(item.strip() for item in text.split(","))
    if not text.strip() or any(not item for item in items):
        raise ConfigError(f"columns must be comma-separated names or 0-based indices such as x,y or 0,2; got "
                          f"{text!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"columns must not repeat a column, got {text!r}")
    return items


def is_plain_name(name: str) -> bool:
    """Whether ``--columns`` takes the header name ``name`` as written (not read as an index or cut at a
    comma)."""
    return not name.isdigit() and "," not in name and name == name.strip()


def read_points(path: str | Path, key: str | None = None, columns: tuple[str, ...] | None = None) -> PointSet:
    """Read and check a point file (``"-"``: standard input, text or .npy).

    The format is told by the file's first bytes (.npy, .npz, HDF5), else it is text: comma-separated
    when the first data line holds a comma, whitespace-separated otherwise; ``#`` starts a comment; a
    first line that is not all numbers is the header. ``key`` names the array of an .npz file or the
    dataset of an HDF5 file (needed when there is more than one). ``columns`` picks columns by header
    name or 0-based index. Raises DataError naming the problem (unreadable or empty file, ragged rows,
    text in a numeric column, NaN or inf, fewer than 2 points) and ConfigError for a key or column that
    is not there.
    """
    source = str(path)
    if source == STDIN:
        raw = sys.stdin.buffer.read()
        where = "standard input"
    else:
        file = Path(path)
        if file.is_dir():
            raise DataError(f"{file} is a folder; give a point file (CSV, text, .npy, .npz or HDF5)")
        try:
            raw = _read_once(file)
        except FileNotFoundError:
            raise DataError(f"{file} does not exist; check the path") from None
        except PermissionError:
            raise DataError(f"{file} is not readable (permission denied); check its permissions") from None
        except OSError as exc:
            raise DataError(f"{file} cannot be read ({exc.strerror or exc}); check the file") from None
        where = str(file)
    if raw is None:
        values, names, label = _read_hdf5(Path(path), key)
    else:
        if not raw.strip():
            raise DataError(f"{where} is empty; give a file with one point per row")
        if raw.startswith(_HDF5_MAGIC):  # only a stream gets here: h5py reads files, not streams
            fix = "give its path instead of -" if source == STDIN else "save it to a file and give that path"
            raise DataError(f"an HDF5 file cannot be read from a stream ({where}); {fix}")
        if raw.startswith(_NPY_MAGIC):
            _no_key(key, where, ".npy")
            values, names, label = _from_array(_load_npy(raw, where), where), None, ""
        elif raw.startswith(_ZIP_MAGIC):
            values, names, label = _read_npz(raw, where, key)
        else:
            _no_key(key, where, "text")
            values, names = _read_text(raw, where, columns)
            label = ""
            columns = None  # picked while parsing: the other columns may hold text
    names = names or tuple(f"x{j}" for j in range(values.shape[1]))
    if columns is not None:
        index = [_column_index(c, names, where) for c in columns]
        values, names = values[:, index], tuple(names[j] for j in index)
    _check_values(values, where)
    return PointSet(np.ascontiguousarray(values, dtype=np.float64), names, source + label)


def _read_once(file: Path) -> bytes | None:
    """The bytes of ``file``, or None for an HDF5 file (h5py opens it by name). Read in one pass: a pipe
    (``swarmctl cluster <(zcat points.csv.gz)``) gives its bytes only once, so the format is told from the
    first bytes of the same read."""
    with open(file, "rb") as fh:
        head = fh.read(len(_HDF5_MAGIC))
        if head == _HDF5_MAGIC and file.is_file():
            return None
        return head + fh.read()


def _no_key(key: str | None, where: str, kind: str) -> None:
    if key is not None:
        raise DataError(f"--key is for .npz and HDF5 files; {where} is a {kind} file: leave --key out")


def _check_values(values: np.ndarray, where: str) -> None:
    if values.shape[1] == 0:
        raise DataError(f"{where} has no columns; give one point per row")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{where}: row {row + 1}, column {col + 1} is {values[row, col]}; every value must be a "
                        f"finite number (remove or fill the {int(bad.any(axis=1).sum()):,} row(s) with NaN or inf)")
    if len(values) < 2:
        raise DataError(f"{where} holds {len(values)} point(s); clustering needs at least 2")


def _column_index(column: str, names: tuple[str, ...], where: str) -> int:
    if column in names:
        return names.index(column)
    if re.fullmatch(r"\d+", column):
        if int(column) < len(names):
            return int(column)
        raise DataError(f"--columns: column {column} is out of range; {where} has {len(names)} columns (0.."
                          f"{len(names) - 1})")
    raise DataError(f"--columns: {where} has no column {column!r}; its columns are {', '.join(names)} (or give "
                      "0-based indices)")


def _from_array(arr: np.ndarray, where: str) -> np.ndarray:
    """An array from a binary file as (N, D) float64; DataError for anything else."""
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{where} holds {arr.dtype} values, not numbers; give a numeric array of points x features")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise DataError(f"{where} holds an array of shape {arr.shape}; give a 2-D array (points x features)")
    return arr.astype(np.float64)


def _load_npy(raw: bytes, where: str) -> np.ndarray:
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{where} is not a readable .npy file ({_short(exc)}); write it with numpy.save") from None


def _read_npz(raw: bytes, where: str, key: str | None) -> tuple[np.ndarray, None, str]:
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            keys = list(npz.files)
            if key is None:
                if len(keys) != 1:
                    raise DataError(f"{where} holds {len(keys)} arrays ({', '.join(keys) or 'none'}); pick one "
                                      "with --key")
                key = keys[0]
            elif key not in keys:
                raise DataError(f"--key: {where} has no array {key!r}; it has {', '.join(keys) or 'none'}")
            arr = npz[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{where} is not a readable .npz file ({_short(exc)}); write it with numpy.savez") from None
    return _from_array(arr, f"{where}[{key}]"), None, f"[{key}]"


def _read_hdf5(file: Path, key: str | None) -> tuple[np.ndarray, None, str]:
    try:
        with h5py.File(file, "r") as f:
            datasets: list[str] = []
            f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
            if key is None:
                if len(datasets) != 1:
                    shown = ", ".join(datasets[:8]) + (" ..." if len(datasets) > 8 else "")
                    raise DataError(f"{file} holds {len(datasets)} datasets ({shown or 'none'}); pick one with "
                                      "--key PATH")
                key = datasets[0]
            obj = f.get(key.strip("/"))
            if not isinstance(obj, h5py.Dataset):
                raise DataError(f"--key: {file} has no dataset {key!r}; its datasets are "
                                  f"{', '.join(datasets[:8]) or 'none'}")
            arr = obj[()]
    except OSError as exc:
        raise DataError(f"{file} is not a readable HDF5 file ({_short(exc)}); check the file") from None
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    return _from_array(arr, f"{file}[{key}]"), None, f"[{key}]"


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def _read_text(raw: bytes, where: str,
               columns: tuple[str, ...] | None = None) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """CSV or whitespace-separated numbers, with an optional header line; only ``columns`` (all if None)
    need to hold numbers."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{where} is neither text nor a .npy, .npz or HDF5 file; give a CSV or text file of "
                        "numbers") from None
    content = _content_lines(text)
    first_no, first = next(content, (0, ""))
    if not first_no:
        raise DataError(f"{where} holds no data rows (only blank or comment lines); give one point per row")
    delimiter = "," if "," in first else None
    fields = _split(first, delimiter)
    names, skip = None, 0
    if not all(_is_number(f) for f in fields):
        if delimiter:  # a CSV header may quote names that hold commas
            fields = next(csv.reader([first], skipinitialspace=True))
        names = tuple(f.strip().strip('"').strip("'") for f in fields)
        if any(not n for n in names):
            raise DataError(f"{where}, line {first_no}: the header has an empty column name; name every column")
        if next(content, None) is None:
            raise DataError(f"{where} has a header but no data rows; give one point per row")
        skip = first_no
    width = len(fields)
    all_names = names or tuple(f"x{j}" for j in range(width))
    use = list(range(width)) if columns is None else [_column_index(c, all_names, where) for c in columns]
    picked = tuple(all_names[j] for j in use)
    try:  # the fast path; on any problem the scan below finds the line and says what is wrong
        values = np.loadtxt(io.StringIO(text), delimiter=delimiter, dtype=np.float64, ndmin=2, comments="#",
                            skiprows=skip, usecols=None if columns is None else use)
        if values.shape[1] == len(use) and (columns is None or _same_width(text, skip, delimiter, width)):
            return values, picked
    except ValueError:
        pass
    for number, line in _content_lines(text):
        if number <= skip:
            continue
        row = _split(line.split("#", 1)[0], delimiter)
        if len(row) != width:
            raise DataError(f"{where}, line {number}: {len(row)} values where the first row has {width}; every row "
                            "needs the same number of columns")
        for col in use:
            value = row[col]
            if not _is_number(value):
                shown = value.strip()[:30] or "an empty value"
                raise DataError(f"{where}, line {number}, column {col + 1}: {shown!r} is not a number; fix the value "
                                "or pick numeric columns with --columns")
    raise DataError(f"{where} could not be read as a table of numbers; check its format")


def _same_width(text: str, skip: int, delimiter: str | None, width: int) -> bool:
    """Whether every data row has ``width`` fields (loadtxt with usecols does not check the others)."""
    body = text.split("\n", skip)[-1] if skip else text
    return all(len(_split(line.split("#", 1)[0], delimiter)) == width for line in body.splitlines()
               if line.strip() and not line.lstrip().startswith("#"))


def _content_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the lines that are neither blank nor comments, lazily."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, line


def _split(line: str, delimiter: str | None) -> list[str]:
    return line.split(delimiter) if delimiter else line.split()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_cluster_csv(path: Path, points: PointSet, cluster: np.ndarray, probability: np.ndarray,
                      entropy: np.ndarray) -> None:
    """Write the points (user units, the shortest text that reads back exactly) with their cluster, its
    probability and the entropy of the class distribution (nats, 6 digits), one row per point, atomically."""
    line = io.StringIO()
    csv.writer(line, lineterminator="").writerow([*points.names, "cluster", "probability", "entropy"])
    D = points.values.shape[1]
    row = ",".join(["{!r}"] * D + ["{}", "{:.6g}", "{:.6g}"])
    columns = [*points.values.T.tolist(), cluster.tolist(), probability.tolist(), entropy.tolist()]

    def write(fh: BinaryIO) -> None:
        fh.write((line.getvalue() + "\n").encode())
        rows = zip(*columns, strict=True)
        while block := [row.format(*r) for _, r in zip(range(100_000), rows, strict=False)]:
            fh.write(("\n".join(block) + "\n").encode())

    atomic_write(path, write)


__all__ = ["STDIN", "PointSet", "is_plain_name", "parse_columns", "read_points", "write_cluster_csv"]

"""A user's point file for `swarmctl cluster`: CSV or whitespace text (header optional), .npy, .npz, HDF5
or standard input, read into one validated (N, D) float64 array; and the clustered points written back
as CSV."""

from __future__ import annotations

import csv
import io
import os
import re
import stat
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import h5py
import numpy as np

from swarmctl.errors import ConfigError, DataError
from swarmctl.files import atomic_write

STDIN = "-"
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip (.npz) file; one with no members
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class PointSet:
    """Points read from a file: ``values`` (N, D) float64, all finite; ``names`` one per column.

    The file's other columns (those ``columns`` did not pick) ride along for the output: ``other_names``
    and ``other_values`` (N, M) text, as written in the file (numbers of a binary file as Python writes
    them); ``layout`` gives the file's column order, an entry j >= 0 for picked column j and -1 - m for
    other column m. ``skipped``: rows left out because a cell was empty, not a number, NaN or inf, or
    missing (only when asked to skip such rows)."""

    values: np.ndarray
    names: tuple[str, ...]
    source: str  # the file as the user named it ("-" for standard input), with the key when there is one
    other_names: tuple[str, ...] = ()
    other_values: np.ndarray | None = None
    layout: tuple[int, ...] | None = None  # None: the picked columns, in order
    skipped: int = 0

    def __len__(self) -> int:
        return len(self.values)

    def output_columns(self) -> tuple[list[str], list[list]]:
        """The names and the columns (lists) of the output CSV, in the file's order: picked columns as
        float64, the others as their text."""
        layout = self.layout if self.layout is not None else tuple(range(len(self.names)))
        names, columns = [], []
        for j in layout:
            if j >= 0:
                names.append(self.names[j])
                columns.append(self.values[:, j].tolist())
            else:
                names.append(self.other_names[-1 - j])
                columns.append(self.other_values[:, -1 - j].tolist())  # type: ignore[index]
        return names, columns


COLUMNS_HELP = ("comma-separated header names or 0-based indices, e.g. x,y or 0,2; name:X and index:N say "
                "which is meant")


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns`` as written: comma-separated selectors, each a header name (``x``), a 0-based index
    (``2``: a plain integer is always an index), or one of the explicit forms ``name:X`` and ``index:N``.
    A plain integer that is also a header name is refused when read (:func:`read_points`): ambiguous."""
    items = tuple(item.strip() for item in text.split(","))
    if not text.strip() or any(not item for item in items):
        raise ConfigError(f"columns must be {COLUMNS_HELP}; got {text!r}")
    for item in items:
        kind, _, rest = item.partition(":")
        if kind == "name" and not rest.strip():
            raise ConfigError(f"columns: {item!r} names no column; write name:X with the header name X")
        if kind == "index" and not re.fullmatch(r"[0-9]+", rest.strip()):
            raise ConfigError(f"columns: {item!r} is not an index; write index:N with N = 0, 1, 2 ...")
    if len(set(items)) != len(items):
        raise ConfigError(f"columns must not repeat a column, got {text!r}")
    return items


def is_plain_name(name: str) -> bool:
    """Whether ``--columns`` takes the header name ``name`` as written: not an integer (read as an index),
    no comma, no surrounding space, no ``name:``/``index:`` prefix."""
    return (not re.fullmatch(r"[0-9]+", name) and "," not in name and name == name.strip() and bool(name)
            and not name.startswith(("name:", "index:")))


def read_points(path: str | Path, key: str | None = None, columns: tuple[str, ...] | None = None,
                skip_bad_rows: bool = False) -> PointSet:
    """Read and check a point file (``"-"``: standard input, text or .npy).

    The format is told by the file's first bytes (.npy, .npz, HDF5), else it is text: comma-separated
    when the first data line holds a comma, whitespace-separated otherwise; ``#`` starts a comment; a
    first line that is not all numbers is the header. ``key`` names the array of an .npz file or the
    dataset of an HDF5 file (needed when there is more than one). ``columns`` picks columns by header
    name or 0-based index. Raises DataError naming the problem (unreadable or empty file, ragged rows,
    text in a numeric column, NaN or inf, fewer than 2 points) and ConfigError for a key or column that
    is not there. With ``skip_bad_rows`` a row whose picked cells are not all finite numbers (empty, text,
    NaN, inf, or missing: a short row) is left out instead, and counted in ``skipped``; the other columns
    are kept (see :class:`PointSet`).
    """
    source = str(path)
    if source == STDIN:
        if sys.stdin is None:
            raise DataError("standard input is closed; pipe the points in (swarmctl cluster - < points.csv) or give "
                            "the file's path")
        where = "standard input"
        raw = _read_stream(sys.stdin.buffer, where)
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
            text = _read_text(raw, where, columns, skip_bad_rows)
            _check_values(text.values, where)
            return PointSet(np.ascontiguousarray(text.values, dtype=np.float64), text.names, source, text.other_names,
                            text.other_values, text.layout, text.skipped)
    names = names or tuple(f"x{j}" for j in range(values.shape[1]))
    other_names, other_values, layout = (), None, None
    if columns is not None:
        index = _column_indices(columns, names, False, where)
        rest = [j for j in range(len(names)) if j not in index]
        other_names = tuple(names[j] for j in rest)
        other_values = np.array([[repr(v) for v in row] for row in values[:, rest].tolist()], dtype=object) \
            .reshape(len(values), len(rest))
        layout = tuple(index.index(j) if j in index else -1 - rest.index(j) for j in range(len(names)))
        values, names = values[:, index], tuple(names[j] for j in index)
    skipped = 0
    if skip_bad_rows:
        good = np.isfinite(values).all(axis=1)
        skipped = int((~good).sum())
        values = values[good]
        other_values = other_values[good] if other_values is not None else None
    _check_values(values, where)
    return PointSet(np.ascontiguousarray(values, dtype=np.float64), names, source + label, other_names, other_values,
                    layout, skipped)


_HEAD = 1 << 16  # bytes read first, to tell the format (and refuse a binary stream) before reading on


def _read_once(file: Path) -> bytes | None:
    """The bytes of ``file``, or None for an HDF5 file (h5py opens it by name). A device file (/dev/zero,
    which never ends) is refused without being read. Read in one pass: a pipe (``swarmctl cluster
    <(zcat points.csv.gz)``) gives its bytes only once, so the format is told from the first bytes of the
    same read."""
    if stat.S_ISCHR(os.stat(file).st_mode) or stat.S_ISBLK(os.stat(file).st_mode):
        raise DataError(f"{file} is a device file, not a point file; give a regular file, a pipe, or - for "
                        "standard input")
    with open(file, "rb") as fh:
        head = fh.read(len(_HDF5_MAGIC))
        if head == _HDF5_MAGIC and file.is_file():
            return None
        return _read_stream(fh, str(file), head)


def _read_stream(fh: BinaryIO, where: str, head: bytes = b"") -> bytes:
    """The rest of ``fh`` after ``head``. A stream whose first block is neither a known binary format nor
    text (text holds no NUL byte) is refused there, so that an endless one (``cat /dev/zero |``) is not
    read until memory runs out."""
    head += fh.read(_HEAD - len(head))
    if not head.startswith((_NPY_MAGIC, *_ZIP_MAGIC, _HDF5_MAGIC)) and b"\x00" in head:
        raise DataError(f"{where} is neither text nor a .npy, .npz or HDF5 file (it holds NUL bytes); give a CSV or "
                        "text file of numbers (UTF-8)")
    return head + fh.read()


def _no_key(key: str | None, where: str, kind: str) -> None:
    if key is not None:
        raise DataError(f"`key` is for .npz and HDF5 files; {where} is a {kind} file: leave `key` out")


def _check_values(values: np.ndarray, where: str) -> None:
    if values.shape[1] == 0:
        raise DataError(f"{where} has no columns; give one point per row")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{where}: row {row + 1}, column {col + 1} is {values[row, col]}; every value must be a "
                        f"finite number (remove or fill the {int(bad.any(axis=1).sum()):,} row(s) with NaN or inf, "
                        "or skip them with `skip_bad_rows`)")
    if len(values) < 2:
        raise DataError(f"{where} holds {len(values)} point(s); clustering needs at least 2")


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
        members = zipfile.ZipFile(io.BytesIO(raw)).namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise DataError(f"{where} is not a readable .npz file ({_short(exc)}); write it with numpy.savez") from None
    other = [m for m in members if not m.endswith(".npy")]
    if other:
        shown = ", ".join(other[:3]) + (" ..." if len(other) > 3 else "")
        raise DataError(f"{where} is a zip archive, not an .npz file (it holds {shown}); unpack the points from it "
                        "(a spreadsheet: save the sheet as CSV) and give that file")
    if not members:
        raise DataError(f"{where} holds no arrays; write the points with numpy.savez")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            keys = list(npz.files)
            if key is None:
                if len(keys) != 1:
                    raise DataError(f"{where} holds {len(keys)} arrays ({', '.join(keys)}); pick one with `key`")
                key = keys[0]
            elif key not in keys:
                raise DataError(f"`key`: {where} has no array {key!r}; it has {', '.join(keys)}")
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
                                      "`key` PATH")
                key = datasets[0]
            obj = f.get(key.strip("/"))
            if not isinstance(obj, h5py.Dataset):
                raise DataError(f"`key`: {file} has no dataset {key!r}; its datasets are "
                                  f"{', '.join(datasets[:8]) or 'none'}")
            arr = obj[()]
    except OSError as exc:
        raise DataError(f"{file} is not a readable HDF5 file ({_short(exc)}); check the file") from None
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    return _from_array(arr, f"{file}[{key}]"), None, f"[{key}]"


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


@dataclass(frozen=True)
class _Text:
    values: np.ndarray
    names: tuple[str, ...]
    other_names: tuple[str, ...]
    other_values: np.ndarray | None
    layout: tuple[int, ...] | None
    skipped: int


def _read_text(raw: bytes, where: str, columns: tuple[str, ...] | None = None, skip_bad_rows: bool = False) -> _Text:
    """CSV or whitespace-separated numbers, with an optional header line; only ``columns`` (all if None)
    need to hold numbers, the others are kept as text. ``skip_bad_rows``: rows that do not have a finite
    number in every picked column (or not the header's number of fields) are left out and counted.

    Lines end in LF, CRLF or CR; ``#`` starts a comment anywhere; a line holding only whitespace (and
    comments) is blank and skipped. Every other line is a row, and the rows returned are these, one to
    one and in order. The first row is the header when none of its fields is a number (Python's float
    reads it), else data."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{where} is neither text nor a .npy, .npz or HDF5 file; give a CSV or text file of "
                        "numbers (UTF-8)") from None
    numbers, rows = _content_lines(text)
    if not rows:
        raise DataError(f"{where} holds no data rows (only blank or comment lines); give one point per row")
    delimiter = "," if "," in rows[0] else None
    fields = _split(rows[0], delimiter)
    names = None
    raw = rows[0].split(delimiter) if delimiter else rows[0].split()  # quotes kept: a quoted "1" is a name
    if not any(_is_number(f) for f in raw):
        if delimiter:  # a CSV header may quote names that hold commas
            fields = next(csv.reader([rows[0]], skipinitialspace=True))
        names = tuple(f.strip().strip('"').strip("'") for f in fields)
        if any(not n for n in names):
            raise DataError(f"{where}, line {numbers[0]}: the header has an empty column name; name every column")
        if len(rows) == 1:
            raise DataError(f"{where} has a header but no data rows; give one point per row")
        numbers, rows = numbers[1:], rows[1:]
    width = len(fields)
    all_names = names or tuple(f"x{j}" for j in range(width))
    use = list(range(width)) if columns is None else _column_indices(columns, all_names, names is not None, where)
    if skip_bad_rows:
        good = _good_rows(rows, delimiter, width, use)
        skipped = len(rows) - len(good)
        rows, numbers = [rows[i] for i in good], [numbers[i] for i in good]
        if not rows:
            raise DataError(f"{where}: every one of its {skipped:,} data rows has an empty, non-numeric or missing "
                            "value in the columns picked; check the file and `columns`")
    else:
        skipped = 0
    values = _parse_rows(rows, numbers, delimiter, width, use, where, header=names is not None)
    rest = [j for j in range(width) if j not in use]
    other_values, layout = None, None
    if rest:
        other_values = np.array([[row[j].strip() for j in rest] for row in (_split(line, delimiter) for line in rows)],
                                dtype=object).reshape(len(rows), len(rest))
        layout = tuple(use.index(j) if j in use else -1 - rest.index(j) for j in range(width))
    return _Text(values, tuple(all_names[j] for j in use), tuple(all_names[j] for j in rest), other_values, layout,
                 skipped)


def _good_rows(rows: list[str], delimiter: str | None, width: int, use: list[int]) -> list[int]:
    """The indices of the rows with ``width`` fields and a finite number in each ``use`` column."""
    good = []
    for i, line in enumerate(rows):
        row = _split(line, delimiter)
        if len(row) != width:
            continue
        try:
            if all(np.isfinite(float(row[j])) for j in use):
                good.append(i)
        except ValueError:
            continue
    return good


def _parse_rows(rows: list[str], numbers: list[int], delimiter: str | None, width: int, use: list[int], where: str,
                header: bool) -> np.ndarray:
    """The ``use`` columns of ``rows`` (comments removed) as float64, one row each; every row must have
    ``width`` fields and a number in each used one. numpy's parser is the fast path; where it fails or
    disagrees in shape, every line is read by Python's float, which decides and names the place."""
    try:
        values = np.loadtxt(rows, delimiter=delimiter, dtype=np.float64, ndmin=2, comments=None,
                            usecols=None if len(use) == width and use == list(range(width)) else use)
        if values.shape == (len(rows), len(use)) and (len(use) == width or _same_width(rows, delimiter, width)):
            return values
    except ValueError:
        pass
    out = np.empty((len(rows), len(use)))
    for i, (number, line) in enumerate(zip(numbers, rows, strict=True)):
        row = _split(line, delimiter)
        if len(row) != width:
            raise DataError(f"{where}, line {number}: {len(row)} values where the first row has {width}; every row "
                            "needs the same number of columns (or skip the others with `skip_bad_rows`)")
        for k, col in enumerate(use):
            try:
                out[i, k] = float(row[col])
            except ValueError:
                shown = row[col].strip()[:30] or "an empty value"
                rule = "; a first line is a header only when none of its fields is a number" \
                    if i == 0 and not header else ""
                raise DataError(f"{where}, line {number}, column {col + 1}: {shown!r} is not a number; fix the value, "
                                f"pick numeric columns with `columns`, or skip such rows with `skip_bad_rows`{rule}"
                                ) from None
    return out


def _same_width(rows: list[str], delimiter: str | None, width: int) -> bool:
    """Whether every row has ``width`` fields (loadtxt with usecols does not check the others)."""
    return all(len(_split(line, delimiter)) == width for line in rows)


def _content_lines(text: str) -> tuple[list[int], list[str]]:
    """The line numbers and contents (comments removed) of the lines that are not blank: lines end in LF,
    CRLF or CR (and nothing else), ``#`` starts a comment, and a line of whitespace is blank."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if "#" in text:
        lines = [line.split("#", 1)[0] for line in lines]
    numbers = [n for n, line in enumerate(lines, start=1) if line and not line.isspace()]
    return numbers, [lines[n - 1] for n in numbers]


def _column_indices(columns: tuple[str, ...], names: tuple[str, ...], header: bool, where: str) -> list[int]:
    """The 0-based indices ``columns`` (see :func:`parse_columns`) pick among ``names``; ``header``: the
    names come from the file (not x0, x1, ... made up for it)."""
    picked: dict[int, str] = {}
    for column in columns:
        index = _column_index(column, names, header, where)
        if index in picked:
            raise DataError(f"`columns` picks column {index} twice ({picked[index]} and {column}); pick each column "
                            "once")
        picked[index] = column
    return list(picked)


def _column_index(column: str, names: tuple[str, ...], header: bool, where: str) -> int:
    kind, _, rest = column.partition(":")
    if kind == "index" and re.fullmatch(r"[0-9]+", rest.strip()):
        return _in_range(int(rest), names, where)
    if kind == "name" and rest.strip():
        return _by_name(rest.strip(), names, where)
    if re.fullmatch(r"[0-9]+", column):
        if header and column in names and names.index(column) != int(column):
            raise DataError(f"`columns` {column} could mean the column named {column!r} (index {names.index(column)}) "
                            f"or index {column}; write name:{column} or index:{column}")
        return _in_range(int(column), names, where)
    return _by_name(column, names, where)


def _in_range(index: int, names: tuple[str, ...], where: str) -> int:
    if index < len(names):
        return index
    raise DataError(f"`columns`: column {index} is out of range; {where} has {len(names)} columns (0.."
                    f"{len(names) - 1})")


def _by_name(name: str, names: tuple[str, ...], where: str) -> int:
    found = [j for j, n in enumerate(names) if n == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise DataError(f"`columns`: the header of {where} names {len(found)} columns {name!r} (indices "
                        f"{', '.join(map(str, found))}); pick one by index")
    raise DataError(f"`columns`: {where} has no column {name!r}; its columns are {', '.join(names)} (or give "
                    "0-based indices)")


def _split(line: str, delimiter: str | None) -> list[str]:
    """The fields of one line: a CSV line with a quote is read as CSV (a quoted field may hold the delimiter
    and doubled quotes), any other by splitting on the delimiter (or whitespace)."""
    if delimiter and '"' in line:
        return next(csv.reader([line], delimiter=delimiter, skipinitialspace=True))
    return line.split(delimiter) if delimiter else line.split()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def write_cluster_csv(path: Path, points: PointSet, cluster: np.ndarray, probability: np.ndarray,
                      entropy: np.ndarray) -> None:
    """Write the points (every column of the file, in its order: the picked ones as the shortest text that
    reads back exactly, the others as they were written) with their cluster, its probability and the
    entropy of the class distribution (nats, 6 digits), one row per point, atomically."""
    names, data = points.output_columns()
    line = io.StringIO()
    csv.writer(line, lineterminator="").writerow([*names, "cluster", "probability", "entropy"])
    layout = points.layout if points.layout is not None else tuple(range(len(points.names)))
    cells = ["{!r}" if j >= 0 else "{}" for j in layout]
    for k, j in enumerate(layout):
        if j < 0:
            data[k] = [_csv_field(v) for v in data[k]]
    row = ",".join([*cells, "{}", "{:.6g}", "{:.6g}"])
    columns = [*data, cluster.tolist(), probability.tolist(), (entropy + 0.0).tolist()]  # no -0

    def write(fh: BinaryIO) -> None:
        fh.write((line.getvalue() + "\n").encode())
        rows = zip(*columns, strict=True)
        while block := [row.format(*r) for _, r in zip(range(100_000), rows, strict=False)]:
            fh.write(("\n".join(block) + "\n").encode())

    atomic_write(path, write)


def _csv_field(text: str) -> str:
    """``text`` as one CSV field: quoted when it holds a comma, a quote or a line break."""
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


__all__ = ["STDIN", "PointSet", "is_plain_name", "parse_columns", "read_points", "write_cluster_csv"]

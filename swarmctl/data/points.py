"""A user's point file for `swarmctl cluster`: CSV or whitespace text (header optional), .npy, .npz, HDF5
or standard input, read into one validated (N, D) float64 array; and the clustered points written back
as CSV (docs/cluster.md, "Point files")."""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import itertools
import math
import os
import re
import stat
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import h5py
import numpy as np

from swarmctl.config import check_memory, host_memory
from swarmctl.errors import ConfigError, DataError, ResourceError
from swarmctl.files import atomic_write, read_errors

STDIN = "-"
_NPY, _ZIP, _HDF5 = b"\x93NUMPY", (b"PK\x03\x04", b"PK\x05\x06"), b"\x89HDF\r\n\x1a\n"  # a zip of no members too
_EXACT = 2**53  # from here on float64 cannot hold every integer
_DIGITS, _INTEGER = re.compile(r"[0-9]+"), re.compile(r"\s*[+-]?[0-9]+\s*")
_NOT_TEXT = "is neither text nor a .npy, .npz or HDF5 file"
_TEXT_FIX = "give a CSV or text file of numbers (UTF-8)"
_Record = tuple[int, int, list[str]]  # a text file's record: its first and last line (from 1), its fields


@dataclass(frozen=True)
class PointSet:
    """Points read from a file: ``values`` (N, D) float64, all finite; ``names`` one per picked column.

    The output carries every column of the file: ``columns`` names them all and ``cells`` (N, len(columns))
    holds each row as the file writes it (None: ``values`` as Python writes them). ``lines``: where each
    point's record starts in a text file. ``skipped``: rows left out by ``skip_bad_rows``. ``offset``: the
    integer a whole-number column reaching 2^53 was read less of, exactly, before the conversion to float64
    (``values`` + ``offset`` are the file's numbers); None where no column needed one."""

    values: np.ndarray
    names: tuple[str, ...]
    source: str  # the file as the user named it ("-" for standard input), with [key] when there is one
    columns: tuple[str, ...]
    cells: np.ndarray | None = None
    lines: np.ndarray | None = None
    skipped: int = 0
    offset: tuple[int, ...] | None = None

    @property
    def shown_names(self) -> tuple[str, ...]:
        """The names of the columns as drawn: a shifted column says by how much (``x - 4611686018427387904``)."""
        if self.offset is None:
            return self.names
        return tuple(f"{n} - {o}" if o else n for n, o in zip(self.names, self.offset, strict=True))

    def __len__(self) -> int:
        return len(self.values)


def parse_columns(text: str) -> tuple[str, ...]:
    """``--columns`` as written: comma-separated selectors, each a header name (``x``), a 0-based index (``2``:
    a plain integer is always an index) or one of the explicit forms ``name:X`` and ``index:N``. A plain integer
    that is also another column's header name is refused when read (:func:`read_points`): ambiguous."""
    items = tuple(item.strip() for item in text.split(","))
    if not all(items):
        raise ConfigError(f"columns must be comma-separated header names or 0-based indices, e.g. x,y or 0,2; name:X "
                          f"and index:N say which is meant; got {text!r}")
    for item in items:
        kind, _, rest = item.partition(":")
        if kind == "name" and not rest.strip():
            raise ConfigError(f"columns: {item!r} names no column; write name:X with the header name X")
        if kind == "index" and not _DIGITS.fullmatch(rest.strip()):
            raise ConfigError(f"columns: {item!r} is not an index; write index:N with N = 0, 1, 2 ...")
    if len(set(map(_selector, items))) != len(items):  # 0 and 00, or 2 and index:2, are one column
        raise ConfigError(f"`columns` must not repeat a column, got {text!r}")
    return items


def _selector(item: str) -> tuple[str, str | int]:
    """What a ``--columns`` item picks: ("index", N) for a plain integer or index:N, else ("name", X)."""
    kind, _, rest = item.partition(":")
    if kind == "index" or _DIGITS.fullmatch(item):
        return "index", int(rest if kind == "index" else item)
    return "name", rest.strip() if kind == "name" else item


def is_plain_name(name: str) -> bool:
    """Whether ``--columns`` takes the header name ``name`` as written: not an integer (read as an index),
    no comma, no surrounding space, no ``name:``/``index:`` prefix."""
    return (bool(name) and name == name.strip() and "," not in name and not _DIGITS.fullmatch(name)
            and not name.startswith(("name:", "index:")))


def read_points(path: str | Path, key: str | None = None, columns: tuple[str, ...] | None = None,
                skip_bad_rows: bool = False) -> PointSet:
    """Read and check a point file (``"-"``: standard input, text or .npy), its format told by its first
    bytes (.npy, .npz, HDF5), else text (docs/cluster.md, "Point files"). ``key`` names the array of an .npz
    file or the dataset of an HDF5 file (needed when there is more than one); ``columns`` (from
    :func:`parse_columns`) picks columns. DataError names the problem and its place; with ``skip_bad_rows``
    a row whose picked cells are not all finite numbers is left out instead, and counted in ``skipped``."""
    source = str(path)
    if source == STDIN:
        if sys.stdin is None:
            raise DataError("standard input is closed; pipe the points in (swarmctl cluster - < points.csv) or give "
                            "the file's path")
        where, raw = "standard input", _read_stream(sys.stdin.buffer, "standard input")
    else:
        where = str(Path(path))
        with read_errors(Path(path), "a point file (CSV, text, .npy, .npz or HDF5)"):
            if stat.S_IFMT(os.stat(path).st_mode) in (stat.S_IFCHR, stat.S_IFBLK):  # /dev/zero would never end
                raise DataError(f"{where} is a device file, not a point file; give a regular file, a pipe, or - for "
                                "standard input")
            with open(path, "rb") as fh:  # in one pass: a pipe (<(zcat points.csv.gz)) gives its bytes only once
                head = fh.read(len(_HDF5))
                raw = None if head == _HDF5 and Path(path).is_file() else _read_stream(fh, where, head)
    if raw is None:  # h5py opens an HDF5 file by its name
        arr, label = _read_hdf5(Path(path), key)
    elif not raw or raw.isspace():
        raise DataError(f"{where} is empty; give a file with one point per row")
    elif raw.startswith(_HDF5):  # only a stream gets here: h5py reads files, not streams
        fix = "give its path instead of -" if source == STDIN else "save it to a file and give that path"
        raise DataError(f"an HDF5 file cannot be read from a stream ({where}); {fix}")
    elif raw.startswith(_ZIP):
        arr, label = _read_npz(raw, where, key)
    elif key is not None:
        kind = ".npy" if raw.startswith(_NPY) else "text"
        raise DataError(f"`key` is for .npz and HDF5 files; {where} is a {kind} file: leave `key` out")
    elif raw.startswith(_NPY):
        arr, label = _load_npy(raw, where), ""
    else:
        return _read_text(raw, where, source, columns, skip_bad_rows)
    return _array_points(arr, where + label, source + label, columns, skip_bad_rows)


def _read_stream(fh: BinaryIO, where: str, head: bytes = b"") -> bytes:
    """The rest of ``fh`` after ``head``, read in pieces up to :func:`max_input_bytes` (``yes 1,2 |`` never ends).
    A first block that is neither a known binary format nor text (text holds no NUL byte) is refused there, so
    that ``cat /dev/zero |`` is not read on."""
    chunks = [head + fh.read((1 << 16) - len(head))]
    if not chunks[0].startswith((_NPY, *_ZIP, _HDF5)) and b"\x00" in chunks[0]:
        raise DataError(f"{where} {_NOT_TEXT} (it holds NUL bytes); {_TEXT_FIX}")
    limit, size = max_input_bytes(), len(chunks[0])
    while chunk := fh.read(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ResourceError(f"{where} goes on past {limit / 2**30:.1f} GiB, more than this machine's memory can "
                                "read as points (a stream that never ends?); give a smaller file")
    return b"".join(chunks)


def max_input_bytes() -> int:
    """The most bytes of a point file read: an eighth of memory (parsed text takes several times its bytes)."""
    return host_memory() // 8


# ---- arrays: .npy, .npz, HDF5 ---------------------------------------------------------------------------------

def _array_points(arr: np.ndarray, where: str, source: str, columns: tuple[str, ...] | None,
                  skip_bad_rows: bool) -> PointSet:
    """An array of a binary file as points (columns x0, x1, ...), its cells as text when columns are picked or
    integers reach 2^53 (:func:`_points` shifts those exactly)."""
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{where} holds {arr.dtype} values, not numbers; give a numeric array of points x features")
    arr = arr[:, None] if arr.ndim == 1 else arr
    if arr.ndim != 2:
        raise DataError(f"{where} holds an array of shape {arr.shape}; give a 2-D array (points x features)")
    names = tuple(f"x{j}" for j in range(arr.shape[1]))
    use = list(range(len(names))) if columns is None else _column_indices(columns, names, where)
    values, cells = arr.astype(np.float64, copy=False), None  # a float64 array is the points: no copy
    if columns is not None or (arr.dtype.kind in "iu" and np.abs(values).max(initial=0) >= _EXACT):
        cells = _as_text(arr if arr.dtype.kind in "iu" else values)
        values = values[:, use]
    skipped = 0
    if skip_bad_rows:
        good = np.isfinite(values).all(axis=1)
        values, cells, skipped = values[good], None if cells is None else cells[good], int((~good).sum())
    return _points(values, names, use, where, source, cells, None, skipped)


def _load_npy(raw: bytes, where: str) -> np.ndarray:
    """The array of an .npy file's bytes; one whose header promises more bytes than follow it (a damaged
    or cut file) is refused before any array of that size is allocated."""
    fh = io.BytesIO(raw)
    with contextlib.suppress(ValueError, OSError, EOFError, SyntaxError, TypeError):  # np.load names them below
        major, _ = np.lib.format.read_magic(fh)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(fh, max_header_size=1 << 20)
        needed, held = math.prod(shape) * dtype.itemsize, len(raw) - fh.tell()
        if not dtype.hasobject and needed > held:
            raise DataError(f"{where} is damaged: its header promises an array of shape {shape} ({needed:,} bytes) "
                            f"but it holds {held:,} bytes; write it again with numpy.save")
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{where} is not a readable .npy file ({_short(exc)}); write it with numpy.save") from None


def _read_npz(raw: bytes, where: str, key: str | None) -> tuple[np.ndarray, str]:
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            if other := [m for m in npz.zip.namelist() if not m.endswith(".npy")]:
                raise DataError(f"{where} is a zip archive, not an .npz file (it holds {_few(other, 3)}); unpack the "
                                "points from it (a spreadsheet: save the sheet as CSV) and give that file")
            if not npz.files:
                raise DataError(f"{where} holds no arrays; write the points with numpy.savez")
            if (key := _key(npz.files, key, where, "arrays")) not in npz.files:
                raise DataError(f"`key`: {where} has no array {key!r}; it has {', '.join(npz.files)}")
            return npz[key], f"[{key}]"
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{where} is not a readable .npz file ({_short(exc)}); write it with numpy.savez") from None


def _read_hdf5(file: Path, key: str | None) -> tuple[np.ndarray, str]:
    try:
        with h5py.File(file, "r") as f:
            datasets = _hdf5_datasets(f)
            key = _key(datasets, key, str(file), "datasets")
            if not isinstance(obj := f.get(key.strip("/")), h5py.Dataset):
                raise DataError(f"`key`: {file} has no dataset {key!r}; its datasets are {_few(datasets, 8) or 'none'}")
            # read as stored, then as float64: both at once, checked from the metadata before anything is read
            check_memory(obj.size * (obj.dtype.itemsize + 8), host_memory(), f"{file}[{key}] ({obj.shape})",
                         "give a smaller dataset, or a part of it")
            return np.asarray(obj[()]), f"[{key}]"
    except OSError as exc:
        raise DataError(f"{file} is not a readable HDF5 file ({_short(exc)}); check the file") from None


def _key(keys: list[str], key: str | None, where: str, kind: str) -> str:
    """``key``, or the one array or dataset (``kind``) of the file when none is given."""
    if key is None and len(keys) != 1:
        raise DataError(f"{where} holds {len(keys)} {kind} ({_few(keys, 8) or 'none'}); pick one with `key`")
    return keys[0] if key is None else key


def _hdf5_datasets(group: h5py.Group, prefix: str = "", seen: set[tuple[str, int]] | None = None) -> list[str]:
    """The paths of every dataset under ``group``, through soft and external links (``visititems`` follows
    none); each group once, so a link back up ends there; a dangling link is left out."""
    seen = set() if seen is None else seen
    out: list[str] = []
    for name in group:
        try:
            obj = group[name]
        except (KeyError, OSError, ValueError):  # a dangling soft or external link
            continue
        if isinstance(obj, h5py.Dataset):
            out.append(prefix + name)
        elif isinstance(obj, h5py.Group) and (place := (obj.file.filename, h5py.h5o.get_info(obj.id).addr)) not in seen:
            seen.add(place)
            out += _hdf5_datasets(obj, f"{prefix}{name}/", seen)
    return out


# ---- text: CSV or whitespace-separated ------------------------------------------------------------------------

def _read_text(raw: bytes, where: str, source: str, columns: tuple[str, ...] | None,
               skip_bad_rows: bool) -> PointSet:
    """CSV or whitespace-separated text; a file that does not read and that ``;`` splits into the same number
    of fields on every line is named as ``;``-separated, with the conversion."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{where} {_NOT_TEXT}; {_TEXT_FIX}") from None
    lines, plain = io.StringIO(text, newline="").readlines(), text.isascii() and "_" not in text  # LF, CRLF, CR
    del text  # the lines hold it
    collect = gc.isenabled()
    gc.disable()  # a million small lists, none in a cycle: the collector would only slow it down
    try:
        return _text_points(lines, plain, where, source, columns, skip_bad_rows)
    except DataError:
        widths = {line.count(";") + 1 for line in lines if not _skipped(line)}
        if len(widths) == 1 and (width := widths.pop()) > 1:
            raise DataError(f"{where} looks like `;`-separated ({width} fields per line at `;`), which swarmctl does "
                            "not read; convert it, e.g. tr ';,' ',.' (decimal commas become points), and give that "
                            "file") from None
        raise
    finally:
        if collect:
            gc.enable()


def _text_points(lines: list[str], plain: bool, where: str, source: str, columns: tuple[str, ...] | None,
                 skip_bad_rows: bool) -> PointSet:
    """The points of a text file's ``lines``: the first record is a header when none of its fields is a finite
    number; only the picked columns need to hold numbers, the others ride along. ``plain``: the file is ASCII
    without ``_``, so that float reads its cells as a CSV file means them."""
    records = _records(lines, where)
    if not records:
        raise DataError(f"{where} holds no data rows (only blank or comment lines); give one point per row")
    first, names = records[0], None
    head = "".join(lines[first[0] - 1:first[1]])
    if not any(map(_finite, head.split("," if "," in head else None))):  # quotes kept: a quoted "1" is a name
        names = tuple(f.strip('"').strip("'") for f in first[2])
        if not all(names):
            raise DataError(f"{where}, line {first[0]}: the header has an empty column name; name every column")
        if len(records) == 1:
            raise DataError(f"{where} has a header but no data rows; give one point per row")
        records = records[1:]
    width = len(first[2])
    names = names or tuple(f"x{j}" for j in range(width))
    use = list(range(width)) if columns is None else _column_indices(columns, names, where)
    skipped = 0
    if skip_bad_rows:
        kept = [r for r in records if not _problem(r, first, width, use)]
        if not kept:
            raise DataError(f"{where}: every one of its {len(records):,} data rows has an empty, non-numeric or "
                            "missing value in the columns picked; check the file and `columns`")
        records, skipped = kept, len(records) - len(kept)
    cells = values = None
    if all(len(r[2]) == width for r in records):
        cells = np.empty((len(records), width), dtype=object)
        cells[:] = [r[2] for r in records]
        with contextlib.suppress(ValueError):
            values = cells[:, use].astype(np.float64)
    if values is None or not (plain or all(_number(c) is not None for c in cells[:, use].ravel().tolist())):
        line, problem = next((r[0], p) for r in records if (p := _problem(r, first, width, use)))  # the first
        raise DataError(f"{where}, line {line}{problem}")
    return _points(values, names, use, where, source, cells, np.array([r[0] for r in records]), skipped)


def _problem(record: _Record, first: _Record, width: int, use: list[int]) -> str:
    """What is wrong with a data record, said from its line on (", column 2: 'x' is not a number; ..."), or ""."""
    line, last, fields = record
    if len(fields) != width:
        hint = f" (a quoted field runs on to line {last}: check its quotes)" if last > line else \
            " (a # starts a comment only at the start of a line)" if "#" in "".join(first[2] + fields) else ""
        return (f": {len(fields)} values where the first row has {width}{hint}; every row needs the same number of "
                "columns (or skip the others with `skip_bad_rows`)")
    for col in use:
        if (value := _number(fields[col])) is None:
            shown = repr(fields[col][:30]) if fields[col] else "an empty value"
            rule = "; a first line is a header only when none of its fields is a finite number" if record is first \
                else ""
            rule += "; a # starts a comment only at the start of a line" if "#" in shown else ""
            return (f", column {col + 1}: {shown} is not a number; fix the value, pick numeric columns with `columns`, "
                    f"or skip such rows with `skip_bad_rows`{rule}")
        if not math.isfinite(value):
            return _not_finite(col, fields[col])
    return ""


def _records(lines: list[str], where: str) -> list[_Record]:
    """The records of a text file, blank and comment lines left out: comma-separated when its first record
    (read as CSV: it may run over lines) holds a comma; else whitespace-separated, a line a record, unquoted."""
    head = next((line for line in lines if not _skipped(line)), "")
    if '"' in head and "," not in head:  # a quoted field may run on over lines: the whole first record decides
        line, last, _ = next(_csv_records(lines, where))
        head = "".join(lines[line - 1:last])
    if "," in head:
        return list(_csv_records(lines, where))
    return [(n, n, line.split()) for n, line in enumerate(lines, start=1) if not _skipped(line)]


def _csv_records(lines: list[str], where: str) -> Iterator[_Record]:
    """The records of comma-separated ``lines``, read by the csv module: a quoted field may hold commas,
    doubled quotes and line breaks. A blank or comment line is one only between records."""
    start = 0  # the lines read before the next record
    while start < len(lines):
        reader, base = csv.reader(itertools.islice(lines, start, None), skipinitialspace=True), start
        try:
            for fields in reader:
                line, start = start + 1, base + reader.line_num
                if not _skipped(lines[line - 1]):
                    yield line, line if start == line else start, list(map(str.strip, fields))  # one int a line
                elif start > line:  # a comment holding a quote the reader read on from: read on after the comment
                    start = line
                    break
        except csv.Error as exc:
            if not _skipped(lines[start]):
                raise DataError(f"{where}, line {start + 1}: {_short(exc)}; check the file's quotes") from None
            start += 1


def _skipped(line: str) -> bool:
    return not (text := line.lstrip()) or text[0] == "#"


def _number(text: str) -> float | None:
    """The cell as a number (NaN and inf included), or None (float also reads ``1_000`` and other scripts' digits)."""
    try:
        return float(text) if text.isascii() and "_" not in text else None
    except ValueError:
        return None


def _finite(text: str) -> bool:
    return (value := _number(text)) is not None and math.isfinite(value)


def _column_indices(columns: tuple[str, ...], names: tuple[str, ...], where: str) -> list[int]:
    """The 0-based indices ``columns`` (from :func:`parse_columns`) pick among ``names``."""
    picked: dict[int, str] = {}
    for column in columns:
        kind, value = _selector(column)
        if kind == "name":
            found = [j for j, n in enumerate(names) if n == value]
            if len(found) > 1:
                raise DataError(f"`columns`: the header of {where} names {len(found)} columns {value!r} (indices "
                                f"{', '.join(map(str, found))}); pick one by index")
            if not found:
                raise DataError(f"`columns`: {where} has no column {value!r}; its columns are {', '.join(names)} (or "
                                "give 0-based indices)")
            value = found[0]
        elif _DIGITS.fullmatch(column) and column in names and names.index(column) != value:  # another's name too
            raise DataError(f"`columns` {column} could mean the column named {column!r} (index {names.index(column)}) "
                            f"or index {column}; write name:{column} or index:{column}")
        elif value >= len(names):
            raise DataError(f"`columns`: column {value} is out of range; {where} has {len(names)} columns (0.."
                            f"{len(names) - 1})")
        if value in picked:
            raise DataError(f"`columns` picks column {value} twice ({picked[value]} and {column}); pick each column "
                            "once")
        picked[value] = column
    return list(picked)


# ---- every format: the checks, large integers, the output -----------------------------------------------------

def _points(values: np.ndarray, columns: tuple[str, ...], use: list[int], where: str, source: str,
            cells: np.ndarray | None, lines: np.ndarray | None, skipped: int) -> PointSet:
    """Refuse no columns, a value that is not finite and fewer than 2 points, naming places as an editor shows
    them: line (an array: row) and column, from 1; then shift whole-number columns that reach 2^53.
    ``use``: the file's column of each column of ``values``."""
    if values.shape[1] == 0:
        raise DataError(f"{where} has no columns; give one point per row")
    if not (finite := np.isfinite(values)).all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        place = f"line {lines[row]}" if lines is not None else f"row {row + 1}"
        raise DataError(f"{where}, {place}" + _not_finite(use[col], values[row, col] if cells is None else
                                                          cells[row, use[col]]))
    if len(values) < 2:
        raise DataError(f"{where} holds {len(values)} point(s); clustering needs at least 2")
    offset = _shift_large_integers(values, cells, use)
    return PointSet(np.ascontiguousarray(values), tuple(columns[j] for j in use), source, columns, cells, lines,
                    skipped, offset)


def _not_finite(col: int, shown: object) -> str:
    return (f", column {col + 1}: {shown} is not a finite number; remove or fill the rows with NaN or inf, or skip "
            "them with `skip_bad_rows`")


def _shift_large_integers(values: np.ndarray, cells: np.ndarray | None, use: list[int]) -> tuple[int, ...] | None:
    """Shift each column of ``values`` that reaches 2^53 and whose cells (the file's column ``use[j]``) are all
    whole numbers by its smallest number, exactly, before the conversion to float64: the differences, all
    clustering sees, survive (2^62 + 1 and 2^62 + 2 are one float64). In place; the offsets, or None."""
    offset = [0] * values.shape[1]
    for j in range(values.shape[1]):
        if cells is None or np.abs(values[:, j]).max(initial=0) < _EXACT:
            continue
        column = cells[:, use[j]].tolist()
        if all(_INTEGER.fullmatch(c) for c in column):
            offset[j] = min(map(int, column))
            values[:, j] = [float(int(c) - offset[j]) for c in column]
    return tuple(offset) if any(offset) else None


def _as_text(values: np.ndarray) -> np.ndarray:
    """Numbers of a binary file as text cells: the shortest text that reads back exactly."""
    return np.array([[repr(v) for v in row] for row in values.tolist()], dtype=object).reshape(values.shape)


def _few(names: list[str], most: int) -> str:
    return ", ".join(names[:most]) + (" ..." if len(names) > most else "")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def write_cluster_csv(path: Path, points: PointSet, cluster: np.ndarray, probability: np.ndarray,
                      entropy: np.ndarray, comment: str = "") -> None:
    """Write the points (every column of the file, in its order, each cell as the user wrote it: see
    :class:`PointSet`) with their cluster, its probability and the entropy of the class distribution (nats,
    6 digits), one row per point, atomically; ``comment``, when given, first as one line starting with ``#``
    (what made the clusters; swarmctl, and pandas with ``comment="#"``, skip it)."""
    cells = _as_text(points.values) if points.cells is None else points.cells
    head = ",".join(map(_csv_field, (*points.columns, "cluster", "probability", "entropy"))) + "\n"
    if comment:
        head = "# " + " ".join(comment.split()) + "\n" + head  # one line, whatever the comment holds
    rows = zip(cells.tolist(), cluster.tolist(), probability.tolist(), (entropy + 0.0).tolist(), strict=True)  # no -0

    def write(fh: BinaryIO) -> None:
        fh.write(head.encode())
        while block := [f"{','.join(map(_csv_field, c))},{k},{p:.6g},{e:.6g}"
                        for _, (c, k, p, e) in zip(range(100_000), rows, strict=False)]:
            fh.write(("\n".join(block) + "\n").encode())

    atomic_write(path, write)


def _csv_field(text: str) -> str:
    """``text`` as one CSV field that swarmctl and the csv module read back as ``text``: quoted when it holds
    a comma, a quote, a line break or a ``#`` (which could start a comment)."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r#') else text


__all__ = ["STDIN", "PointSet", "is_plain_name", "parse_columns", "read_points", "write_cluster_csv"]

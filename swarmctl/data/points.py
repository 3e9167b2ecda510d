"""A user's point file for `swarmctl cluster`: CSV or whitespace text (header optional), .npy, .npz, HDF5
or standard input, read into one validated (N, D) float64 array; and the clustered points written back
as CSV."""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import math
import os
import re
import stat
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import h5py
import numpy as np

from swarmctl.config import check_memory, host_memory
from swarmctl.errors import ConfigError, DataError, ResourceError
from swarmctl.files import atomic_write, read_errors

STDIN = "-"
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip (.npz) file; one with no members
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class PointSet:
    """Points read from a file: ``values`` (N, D) float64, all finite; ``names`` one per picked column.

    The output carries every column of the file as written: ``columns`` names them all and ``cells`` (N,
    len(columns)) holds each row as text (a binary file's numbers as Python writes them). ``lines``: where
    each point's record starts in a text file. ``skipped``: rows left out by ``skip_bad_rows``. ``offset``:
    the integer a whole-number column reaching 2^53 was read less of, exactly, before the conversion to
    float64 (``values`` + ``offset`` are the file's numbers); None where no column needed one."""

    values: np.ndarray
    names: tuple[str, ...]
    source: str  # the file as the user named it ("-" for standard input), with the key when there is one
    columns: tuple[str, ...] = ()  # () : the picked columns are all there is
    cells: np.ndarray | None = None  # None: the values, as Python writes them
    lines: np.ndarray | None = None
    skipped: int = 0
    offset: tuple[int, ...] | None = None

    @property
    def shown_names(self) -> tuple[str, ...]:
        """The names of ``values``' columns as drawn: a shifted column says by how much (``x - 4611686018427387904``).
        """
        if self.offset is None:
            return self.names
        return tuple(f"{n} - {o}" if o else n for n, o in zip(self.names, self.offset, strict=True))

    def __len__(self) -> int:
        return len(self.values)


def _as_text(values: np.ndarray) -> np.ndarray:
    """Numbers of a binary file as text cells: the shortest text that reads back exactly."""
    return np.array([[repr(v) for v in row] for row in values.tolist()], dtype=object).reshape(values.shape)


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
    if len(set(map(_selector, items))) != len(items):  # 0 and 00, or 2 and index:2, are one column
        raise ConfigError(f"`columns` must not repeat a column, got {text!r}")
    return items


def _selector(item: str) -> tuple[str, str | int]:
    """What a ``--columns`` item picks: ("index", N) for a plain integer or index:N, else ("name", X)."""
    kind, _, rest = item.partition(":")
    if re.fullmatch(r"[0-9]+", item):
        return "index", int(item)
    if kind == "index":
        return "index", int(rest)
    return "name", rest.strip() if kind == "name" else item


def is_plain_name(name: str) -> bool:
    """Whether ``--columns`` takes the header name ``name`` as written: not an integer (read as an index),
    no comma, no surrounding space, no ``name:``/``index:`` prefix."""
    return (not re.fullmatch(r"[0-9]+", name) and "," not in name and name == name.strip() and bool(name)
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
        where = "standard input"
        raw = _read_stream(sys.stdin.buffer, where)
    else:
        file = Path(path)
        with read_errors(file, "a point file (CSV, text, .npy, .npz or HDF5)"):
            raw = _read_once(file)
        where = str(file)
    if raw is None:
        values, label = _read_hdf5(Path(path), key)
    else:
        if not raw.strip():
            raise DataError(f"{where} is empty; give a file with one point per row")
        if raw.startswith(_HDF5_MAGIC):  # only a stream gets here: h5py reads files, not streams
            fix = "give its path instead of -" if source == STDIN else "save it to a file and give that path"
            raise DataError(f"an HDF5 file cannot be read from a stream ({where}); {fix}")
        if raw.startswith(_NPY_MAGIC):
            _no_key(key, where, ".npy")
            values, label = _from_array(_load_npy(raw, where), where), ""
        elif raw.startswith(_ZIP_MAGIC):
            values, label = _read_npz(raw, where, key)
        else:
            _no_key(key, where, "text")
            return _read_text(raw, where, source, columns, skip_bad_rows)
    names = tuple(f"x{j}" for j in range(values.shape[1]))
    all_names, cells = names, None
    index = list(range(len(names)))
    exact = values if values.dtype.kind in "iu" else None
    values = values.astype(np.float64)
    if columns is not None or (exact is not None and np.abs(values).max(initial=0) >= _EXACT):
        index = _column_indices(columns, names, False, where) if columns is not None else index
        cells = _as_text(values if exact is None else exact)  # every column rides along, in its place, exactly
        values, names = values[:, index], tuple(names[j] for j in index)
    skipped = 0
    if skip_bad_rows:
        good = np.isfinite(values).all(axis=1)
        skipped = int((~good).sum())
        values = values[good]
        cells = cells[good] if cells is not None else None
    _check_values(values, where, index)
    offset = _shift_large_integers(values, cells, index)
    return PointSet(np.ascontiguousarray(values, dtype=np.float64), names, source + label,
                    all_names if cells is not None else (), cells, None, skipped, offset)


_EXACT = 2**53  # from here on float64 cannot hold every integer
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _shift_large_integers(values: np.ndarray, cells: np.ndarray | None, index: list[int]) -> tuple[int, ...] | None:
    """Shift each column of ``values`` (N, D) that reaches 2^53 and whose cells (the file's column
    ``index[j]``) are all whole numbers by its smallest number, exactly, before the conversion to float64:
    the differences, all clustering sees, survive (2^62 + 1 and 2^62 + 2 are one float64). In place; the
    offsets, or None where no column needed one."""
    offset = [0] * values.shape[1]
    for j in range(values.shape[1]):
        if cells is None or np.abs(values[:, j]).max(initial=0) < _EXACT:
            continue
        column = cells[:, index[j]].tolist()
        if not all(_INTEGER.fullmatch(c) for c in column):
            continue
        offset[j] = min(map(int, column))
        values[:, j] = [float(int(c) - offset[j]) for c in column]
    return tuple(offset) if any(offset) else None


_HEAD = 1 << 16  # bytes read first, to tell the format (and refuse a binary stream) before reading on


def _read_once(file: Path) -> bytes | None:
    """The bytes of ``file``, or None for an HDF5 file (h5py opens it by name). A device file (/dev/zero,
    which never ends) is refused without being read. Read in one pass: a pipe (``swarmctl cluster
    <(zcat points.csv.gz)``) gives its bytes only once, so the format is told from the first bytes of the
    same read."""
    if stat.S_IFMT(os.stat(file).st_mode) in (stat.S_IFCHR, stat.S_IFBLK):
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
    read until memory runs out; nor is any stream read past :func:`max_input_bytes` (``yes 1,2 |``)."""
    head += fh.read(_HEAD - len(head))
    if not head.startswith((_NPY_MAGIC, *_ZIP_MAGIC, _HDF5_MAGIC)) and b"\x00" in head:
        raise DataError(f"{where} is neither text nor a .npy, .npz or HDF5 file (it holds NUL bytes); give a CSV or "
                        "text file of numbers (UTF-8)")
    limit = max_input_bytes()
    chunks, size = [head], len(head)
    while chunk := fh.read(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ResourceError(f"{where} goes on past {limit / 2**30:.1f} GiB, more than this machine's memory can "
                                "read as points (a stream that never ends?); give a smaller file")
    return b"".join(chunks)


def max_input_bytes() -> int:
    """The most bytes of a point file read: an eighth of the machine's memory (a text file's points and
    cells take several times its bytes while they are parsed)."""
    return host_memory() // 8


def _no_key(key: str | None, where: str, kind: str) -> None:
    if key is not None:
        raise DataError(f"`key` is for .npz and HDF5 files; {where} is a {kind} file: leave `key` out")


def _check_values(values: np.ndarray, where: str, index: list[int], lines: np.ndarray | None = None) -> None:
    """Refuse no columns, a value that is not finite and fewer than 2 points. ``index``: the file's column
    (0-based) of each column of ``values``; ``lines``: each row's line in a text file (None: an array, whose
    rows are counted from 1). Places are named as an editor shows them: line (or row) and column from 1."""
    if values.shape[1] == 0:
        raise DataError(f"{where} has no columns; give one point per row")
    bad = ~np.isfinite(values)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        place = f"line {lines[row]}" if lines is not None else f"row {row + 1}"
        raise DataError(f"{where}, {place}, column {index[col] + 1}: {values[row, col]} is not a finite number; "
                        f"remove or fill the {int(bad.any(axis=1).sum()):,} row(s) with NaN or inf, or skip them "
                        "with `skip_bad_rows`")
    if len(values) < 2:
        raise DataError(f"{where} holds {len(values)} point(s); clustering needs at least 2")


def _from_array(arr: np.ndarray, where: str) -> np.ndarray:
    """An array from a binary file as (N, D), in its own type; DataError for anything else."""
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{where} holds {arr.dtype} values, not numbers; give a numeric array of points x features")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise DataError(f"{where} holds an array of shape {arr.shape}; give a 2-D array (points x features)")
    return arr


def _load_npy(raw: bytes, where: str) -> np.ndarray:
    """The array of an .npy file's bytes; one whose header promises more bytes than follow it (a damaged
    or cut file) is refused before any array of that size is allocated."""
    fh = io.BytesIO(raw)
    with contextlib.suppress(ValueError, OSError, EOFError, SyntaxError, TypeError):  # np.load names them
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
            other = [m for m in npz.zip.namelist() if not m.endswith(".npy")]
            if other:
                shown = ", ".join(other[:3]) + (" ..." if len(other) > 3 else "")
                raise DataError(f"{where} is a zip archive, not an .npz file (it holds {shown}); unpack the points "
                                "from it (a spreadsheet: save the sheet as CSV) and give that file")
            keys = npz.files
            if not keys:
                raise DataError(f"{where} holds no arrays; write the points with numpy.savez")
            if key is None:
                if len(keys) != 1:
                    raise DataError(f"{where} holds {len(keys)} arrays ({', '.join(keys)}); pick one with `key`")
                key = keys[0]
            elif key not in keys:
                raise DataError(f"`key`: {where} has no array {key!r}; it has {', '.join(keys)}")
            arr = npz[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{where} is not a readable .npz file ({_short(exc)}); write it with numpy.savez") from None
    return _from_array(arr, f"{where}[{key}]"), f"[{key}]"


def _read_hdf5(file: Path, key: str | None) -> tuple[np.ndarray, str]:
    try:
        with h5py.File(file, "r") as f:
            datasets = _hdf5_datasets(f)
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
            # read as stored, then as float64: both at once, before anything is read
            check_memory(obj.size * (obj.dtype.itemsize + 8), host_memory(), f"{file}[{key}] ({obj.shape})",
                         "give a smaller dataset, or a part of it")
            arr = np.asarray(obj[()])
    except OSError as exc:
        raise DataError(f"{file} is not a readable HDF5 file ({_short(exc)}); check the file") from None
    return _from_array(arr, f"{file}[{key}]"), f"[{key}]"


def _hdf5_datasets(group: h5py.Group, prefix: str = "", seen: set[tuple[str, int]] | None = None) -> list[str]:
    """The paths of every dataset under ``group``, in groups too, through soft and external links (which
    ``visititems`` does not follow); each group once, so a link back up ends there; a dangling link is
    left out."""
    seen = set() if seen is None else seen
    out: list[str] = []
    for name in group:
        try:
            obj = group[name]
        except (KeyError, OSError, ValueError):  # a dangling soft or external link
            continue
        if isinstance(obj, h5py.Dataset):
            out.append(prefix + name)
        elif isinstance(obj, h5py.Group):
            place = (obj.file.filename, h5py.h5o.get_info(obj.id).addr)
            if place not in seen:
                seen.add(place)
                out += _hdf5_datasets(obj, f"{prefix}{name}/", seen)
    return out


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


class _Record(NamedTuple):
    """One record of a text file: the file ``line`` (1-based) where it starts, the ``last`` line it takes
    (a quoted CSV field may hold line breaks), its ``text`` (comments removed) and its ``fields`` (as the
    csv module reads them for a CSV file, surrounding whitespace removed)."""

    line: int
    last: int
    text: str
    fields: list[str]


def _read_text(raw: bytes, where: str, source: str, columns: tuple[str, ...] | None = None,
               skip_bad_rows: bool = False) -> PointSet:
    """CSV or whitespace-separated text by the rules of docs/cluster.md ("Point files"): only ``columns``
    (all if None) need to hold numbers, the others ride along as text."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{where} is neither text nor a .npy, .npz or HDF5 file; give a CSV or text file of "
                        "numbers (UTF-8)") from None
    records: list[_Record] = []
    collect = gc.isenabled()
    gc.disable()  # a million small lists, none in a cycle: the collector would only slow it down
    try:
        records = _records(text, where)
        if not records:
            raise DataError(f"{where} holds no data rows (only blank or comment lines); give one point per row")
        return _points_from_records(records, where, source, columns, skip_bad_rows)
    except DataError:
        fields = {len(r.text.split(";")) for r in records}
        if len(fields) == 1 and (width := fields.pop()) > 1:
            raise DataError(f"{where} looks like `;`-separated ({width} fields per line at `;`), which swarmctl does "
                            "not read; convert it, e.g. tr ';,' ',.' (decimal commas become points), and give that "
                            "file") from None
        raise
    finally:
        if collect:
            gc.enable()


def _points_from_records(records: list[_Record], where: str, source: str, columns: tuple[str, ...] | None,
                         skip_bad_rows: bool) -> PointSet:
    first = records[0]
    names = None
    pieces = first.text.split("," if "," in first.text else None)  # quotes kept: a quoted "1" is a name
    if not any(_is_finite_number(f) for f in pieces):
        names = tuple(f.strip('"').strip("'") for f in first.fields)
        if any(not n for n in names):
            raise DataError(f"{where}, line {first.line}: the header has an empty column name; name every column")
        if len(records) == 1:
            raise DataError(f"{where} has a header but no data rows; give one point per row")
        records = records[1:]
    width = len(first.fields)
    all_names = names or tuple(f"x{j}" for j in range(width))
    use = list(range(width)) if columns is None else _column_indices(columns, all_names, names is not None, where)
    skipped = 0
    if skip_bad_rows:
        kept = [r for r in records if len(r.fields) == width and all(_is_finite_number(r.fields[j]) for j in use)]
        skipped = len(records) - len(kept)
        if not kept:
            raise DataError(f"{where}: every one of its {skipped:,} data rows has an empty, non-numeric or missing "
                            "value in the columns picked; check the file and `columns`")
        records = kept
    values = None
    if all(len(r.fields) == width for r in records):
        cells = np.empty((len(records), width), dtype=object)
        cells[:] = [r.fields for r in records]
        with contextlib.suppress(ValueError):
            values = cells[:, use].astype(np.float64)
        if values is not None and not all(map(_plain_text, cells[:, use].ravel().tolist())):
            values = None  # Python's float also reads 1_000 and digits of other scripts: named below
    if values is None:  # name the first place, in the file's order, that is not right
        for r in records:
            if len(r.fields) != width:
                run_on = f" (a quoted field runs on to line {r.last}: check its quotes)" if r.last > r.line else \
                    " (a # starts a comment only at the start of a line)" if "#" in first.text + r.text else ""
                raise DataError(f"{where}, line {r.line}: {len(r.fields)} values where the first row has {width}"
                                f"{run_on}; every row needs the same number of columns (or skip the others with "
                                "`skip_bad_rows`)")
            for col in use:
                value = _number(r.fields[col])
                if value is not None and not math.isfinite(value):
                    raise DataError(f"{where}, line {r.line}, column {col + 1}: {r.fields[col].strip()} is not a "
                                    "finite number; remove or fill the rows with NaN or inf, or skip them with "
                                    "`skip_bad_rows`")
                if value is None:
                    shown = repr(r.fields[col][:30]) if r.fields[col] else "an empty value"
                    rule = "; a first line is a header only when none of its fields is a finite number" \
                        if r is first else ""
                    if "#" in shown:
                        rule += "; a # starts a comment only at the start of a line"
                    raise DataError(f"{where}, line {r.line}, column {col + 1}: {shown} is not a number; fix the "
                                    "value, pick numeric columns with `columns`, or skip such rows with "
                                    f"`skip_bad_rows`{rule}")
        raise AssertionError("a cell numpy could not read was read by float")  # pragma: no cover
    lines = np.array([r.line for r in records])
    _check_values(values, where, use, lines)
    offset = _shift_large_integers(values, cells, use)
    return PointSet(np.ascontiguousarray(values), tuple(all_names[j] for j in use), source, all_names, cells, lines,
                    skipped, offset)


def _records(text: str, where: str) -> list[_Record]:
    """The records of a text file, blank and comment lines left out (see :func:`_read_text`). The file is
    comma-separated when its first record (read as CSV: it may run over lines) holds a comma."""
    lines = io.StringIO(text, newline="").readlines()  # ends in LF, CRLF or CR, and nothing else
    first = _csv_records(lines, where, limit=1) if '"' in text else []
    first_text = first[0].text if first else next((k for k in lines if not _skipped(k)), "")
    delimiter = "," if "," in first_text else None  # else whitespace-separated: one line, one record, no quoting
    if delimiter is None or '"' not in text:  # no quoting: one line, one record
        numbers = [n for n, line in enumerate(lines, start=1) if not _skipped(line)]
        rows = [lines[n - 1] for n in numbers]
        fields = [r.split() for r in rows] if delimiter is None else \
            [list(map(str.strip, r.split(delimiter))) for r in rows]
        return list(map(_Record, numbers, numbers, rows, fields))
    return _csv_records(lines, where)


def _csv_records(lines: list[str], where: str, limit: int | None = None) -> list[_Record]:
    """The records of a comma-separated file of ``lines`` (the first ``limit`` of them), read by the csv
    module: a quoted field may hold commas, doubled quotes and line breaks."""
    state = {"start": True, "line": 0, "last": 0}
    parts: list[str] = []

    def feed():  # the lines the csv reader asks for; blank and comment lines only between records
        for n, line in enumerate(lines, start=1):
            if state["start"]:
                if _skipped(line):
                    continue
                state["line"], state["start"] = n, False
                parts.clear()
            state["last"] = n
            parts.append(line)
            yield line

    records: list[_Record] = []
    reader = csv.reader(feed(), skipinitialspace=True)
    try:
        for fields in reader:
            records.append(_Record(state["line"], state["last"], "".join(parts).rstrip("\r\n"),
                                   [f.strip() for f in fields]))
            state["start"] = True
            if len(records) == limit:
                break
    except csv.Error as exc:
        raise DataError(f"{where}, line {state['line']}: {_short(exc)}; check the file's quotes") from None
    return records


def _skipped(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def _column_indices(columns: tuple[str, ...], names: tuple[str, ...], header: bool, where: str) -> list[int]:
    """The 0-based indices ``columns`` (from :func:`parse_columns`) pick among ``names``; ``header``: the
    names come from the file (not x0, x1, ... made up for it)."""
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
        elif header and re.fullmatch(r"[0-9]+", column) and column in names and names.index(column) != value:
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


def _plain_text(text: str) -> bool:
    """Whether a cell is written as a number is in a CSV file: ASCII, without Python's digit separator."""
    return text.isascii() and "_" not in text


def _number(text: str) -> float | None:
    """The cell as a number (NaN and inf included), or None when it is not one."""
    try:
        return float(text) if _plain_text(text) else None
    except ValueError:
        return None


def _is_finite_number(text: str) -> bool:
    return (value := _number(text)) is not None and math.isfinite(value)


def write_cluster_csv(path: Path, points: PointSet, cluster: np.ndarray, probability: np.ndarray,
                      entropy: np.ndarray, comment: str = "") -> None:
    """Write the points (every column of the file, in its order, each cell as the user wrote it: see
    :class:`PointSet`) with their cluster, its probability and the entropy of the class distribution (nats,
    6 digits), one row per point, atomically; ``comment``, when given, first as one line starting with ``#``
    (what made the clusters; swarmctl, and pandas with ``comment="#"``, skip it)."""
    names, cells = (points.names, _as_text(points.values)) if points.cells is None else (points.columns, points.cells)
    head = ",".join(_csv_field(n) for n in (*names, "cluster", "probability", "entropy")) + "\n"
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
    if any(c in text for c in ',"\n\r#'):
        return '"' + text.replace('"', '""') + '"'
    return text


__all__ = ["STDIN", "PointSet", "is_plain_name", "parse_columns", "read_points", "write_cluster_csv"]

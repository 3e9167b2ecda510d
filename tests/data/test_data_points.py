"""The point reader of `swarmctl cluster` (swarmctl.data.points), in process: every format and stream reads to
the same numbers; the rows read are the file's data rows, one to one and in order, by the header rule (files
generated with headers, comments, blank and whitespace lines, every line ending and a label column);
--columns picks by name, by index or in its explicit forms; whole numbers past 2^53 are read exactly; the
output CSV carries the user's own text; and every kind of bad file (damaged, binary, an archive that is not
.npz, a device file, a closed or endless stream, sizes a file claims) is refused with a DataError naming the
problem and the place. How `cluster` ends on such a file (exit code, one line, nothing written), and what it
does with the points, is tests/cli/test_cli_cluster.py."""

import csv
import io
import os
import random
import re
import sys
import threading
import zipfile

import h5py
import numpy as np
import pytest

import swarmctl.data.points as points_module
from swarmctl.data.points import parse_columns, read_points, write_cluster_csv
from swarmctl.errors import ConfigError, DataError, ResourceError

POINTS = np.array([[0.5, -1.25, 3.0], [2.0, 4.5, -0.125], [1e-3, 7.0, 2.5], [-3.5, 0.0, 1e6]])


def _text(rows, sep=",", header=None):
    lines = [sep.join(header)] if header else []
    lines += [sep.join(repr(float(v)) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


# ---- every format, standard input and a named pipe read to the same numbers -------------------------------------

@pytest.mark.parametrize("form", ["csv", "npy", "npz", "h5"])  # every kind of text file: the generated ones below
def test_every_format_reads_the_same_points(tmp_path, form):
    path = tmp_path / f"p.{form}"
    names = ("x0", "x1", "x2")
    if form == "csv":
        names = ("a", "b", "c")
        path.write_text(_text(POINTS, header=names))
    elif form == "npy":
        np.save(path, POINTS)
    elif form == "npz":
        np.savez(path, pts=POINTS)
        path = tmp_path / "p.npz"
    else:
        with h5py.File(path, "w") as f:
            f["group/pts"] = POINTS
    got = read_points(path)
    assert np.array_equal(got.values, POINTS) and got.values.dtype == np.float64
    assert got.names == names


def test_standard_input_takes_text_and_npy_but_names_the_fix_for_hdf5(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_text(POINTS, header=("a", "b", "c")).encode())))
    got = read_points("-")
    assert np.array_equal(got.values, POINTS) and got.names == ("a", "b", "c") and got.source == "-"
    buf = io.BytesIO()
    np.save(buf, POINTS)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(buf.getvalue())))
    assert np.array_equal(read_points("-").values, POINTS)
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f["x"] = POINTS
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((tmp_path / "p.h5").read_bytes())))
    with pytest.raises(DataError, match="give its path"):
        read_points("-")


@pytest.mark.parametrize("form", ["csv", "npy"])
def test_a_named_pipe_is_read_once_and_whole(tmp_path, form):
    """`swarmctl cluster <(zcat points.csv.gz)` hands over a pipe: its bytes can be read only once, so the
    reader must not peek at the format and then read again."""
    if form == "csv":
        data = _text(POINTS, header=("a", "b", "c")).encode()
    else:
        buf = io.BytesIO()
        np.save(buf, POINTS)
        data = buf.getvalue()
    fifo = tmp_path / "points"
    os.mkfifo(fifo)
    got: dict = {}

    def read() -> None:
        try:
            got["points"] = read_points(fifo)
        except Exception as exc:  # reported by the assertion below
            got["error"] = exc

    reader = threading.Thread(target=read)
    reader.start()
    try:
        fifo.write_bytes(data)
    except BrokenPipeError:  # the reader closed the pipe early: the assertion below says so
        pass
    reader.join(timeout=10)
    if reader.is_alive():  # the reader opened the pipe a second time: end it with an empty write
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
    assert "points" in got, f"the pipe was not read whole: {got.get('error')!r}"
    assert np.array_equal(got["points"].values, POINTS)


def test_keys_pick_an_array_or_dataset_and_only_there(tmp_path):
    np.savez(tmp_path / "two.npz", a=POINTS, b=POINTS[:, :2])
    assert read_points(tmp_path / "two.npz", key="b").values.shape == (4, 2)
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["x"], f["g/y"] = POINTS, POINTS[:, :1]
    assert read_points(tmp_path / "two.h5", key="/g/y").values.shape == (4, 1)
    for name in ("two.npz", "two.h5"):
        with pytest.raises(DataError, match="`key`"):
            read_points(tmp_path / name)  # two to choose from
        with pytest.raises(DataError, match="no (array|dataset) 'zz'"):
            read_points(tmp_path / name, key="zz")
    (tmp_path / "p.csv").write_text(_text(POINTS))
    np.save(tmp_path / "p.npy", POINTS)
    for name in ("p.csv", "p.npy"):  # a key for a file that has none
        with pytest.raises(DataError, match="leave `key` out"):
            read_points(tmp_path / name, key="x")


@pytest.mark.parametrize("layout", ["group", "external link", "link loop"])
def test_an_hdf5_file_lists_the_datasets_in_its_groups_and_links_by_path(tmp_path, layout):
    """Points kept in a group, or reached through a link: read when they are the one dataset, and named by
    their path (the key that works) when there are several."""
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(6, 1, (40, 2))])
    path = tmp_path / "p.h5"
    with h5py.File(tmp_path / "inner.h5", "w") as f:
        f.create_group("grp")["points"] = points
    with h5py.File(path, "w") as f:
        if layout == "external link":  # visititems does not follow it: the file seemed to hold no dataset
            f["grp"] = h5py.ExternalLink(str(tmp_path / "inner.h5"), "/grp")
        else:
            f.create_group("grp")["points"] = points
            if layout == "link loop":
                f["grp/up"] = h5py.SoftLink("/grp")
                f["dangling"] = h5py.SoftLink("/nowhere")
    assert np.array_equal(read_points(path).values, points)
    with h5py.File(path, "a") as f:
        f["other"] = points
    with pytest.raises(DataError) as err:
        read_points(path)
    assert "grp/points" in str(err.value) and "other" in str(err.value)


# ---- generated text files: the rows read are the data rows, one to one ------------------------------------------

BLANKS = ["", "   ", "\t", " \t ", "\x0c", "\u00a0", "  \u3000 "]  # lines holding nothing but whitespace
ENDINGS = ["\n", "\r\n", "\r"]


def _number(rng: random.Random) -> tuple[str, float]:
    value = rng.choice([rng.uniform(-1e3, 1e3), rng.gauss(0, 1), float(rng.randint(-50, 50)), 1e-300 * rng.random(),
                        rng.uniform(-1, 1) * 1e300])
    text = rng.choice([repr(value), f"{value:.17g}", f"{value:.17e}"])
    return text, float(text)


def _generated(seed: int):
    """(file bytes, expected values, expected names, columns to pick or None) for one generated text file."""
    rng = random.Random(seed)
    n, d = rng.randint(2, 12), rng.randint(1, 4)
    csv_form = rng.random() < 0.6
    sep = rng.choice([",", ", ", " ,"]) if csv_form else rng.choice([" ", "\t", "  ", " \t"])
    label = rng.random() < 0.4  # a text column (an id, a species) beside the numbers
    header = rng.random() < 0.5
    end = rng.choice(ENDINGS)
    label_at = rng.randint(0, d) if label else None
    values = np.empty((n, d))
    rows = []
    for i in range(n):
        fields = []
        for j in range(d):
            text, values[i, j] = _number(rng)
            fields.append(text)
        if label_at is not None:
            quoted = ['"a, #1"', '"two' + end + 'lines"', '"say ""hi"""'] if csv_form else []
            fields.insert(label_at, rng.choice(["a", "setosa", "id-7", "x", "id#7", *quoted]))
        rows.append(fields)
    names = tuple(f"c{j}" for j in range(d))
    lines = []
    for _ in range(rng.randint(0, 2)):  # leading comments and blank lines
        lines.append(rng.choice(["# exported " + str(rng.random()), rng.choice(BLANKS), "#"]))
    if header:
        head = list(names)
        if label_at is not None:
            head.insert(label_at, "label")
        lines.append(sep.join(head))
    for i, fields in enumerate(rows):
        if i == 0 or rng.random() < 0.2:  # a comment line, indented or not
            lines.append(rng.choice(["# note", "\t# tight", "  #" + "x" * 5]))
        lines.append(sep.join(fields))
        if rng.random() < 0.2:
            lines.append(rng.choice(BLANKS + ["# between"]))
    text = end.join(lines) + rng.choice([end, ""])
    raw = (b"\xef\xbb\xbf" if rng.random() < 0.1 else b"") + text.encode()
    numeric = [k for k in range(d + label) if k != label_at]
    if header:
        full = list(names)
        if label_at is not None:
            full.insert(label_at, "label")
        columns = tuple(full[k] for k in numeric) if rng.random() < 0.5 else tuple(map(str, numeric))
        names_read = tuple(full[k] for k in numeric)
    else:
        columns = tuple(map(str, numeric))
        names_read = tuple(f"x{k}" for k in numeric)
    if label_at is None and rng.random() < 0.5:
        columns, names_read = None, (names if header else tuple(f"x{k}" for k in range(d)))
    return raw, values, names_read, columns


def _check_generated(tmp_path, seed):
    raw, values, names, columns = _generated(seed)
    path = tmp_path / "p.txt"
    path.write_bytes(raw)
    got = read_points(path, columns=columns)
    assert got.values.shape == values.shape, (raw, got.values)
    assert np.array_equal(got.values, values), raw
    assert got.names == names


@pytest.mark.parametrize("seed", range(60))
def test_a_text_file_reads_to_its_data_rows_one_to_one(tmp_path, seed):
    _check_generated(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60, 1000))
def test_many_more_text_files_read_to_their_data_rows_one_to_one(tmp_path, seed):
    _check_generated(tmp_path, seed)


# ---- the header rule --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "rows", "names"), [
    ("1,2,a\n3,4,b\n5,6,c\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),  # a label in the first row: still data
    ("# first\n1,2\n3,4\n5,6\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),  # a comment before the first row
    ("1 2\n  # between\n3 4\n5 6\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),
    ("x,y\n# the header\n1,2\n3,4\n", [[1, 2], [3, 4]], ("x", "y")),
    ("x,y\n\n  \n1,2\n\t\n3,4\n", [[1, 2], [3, 4]], ("x", "y")),  # whitespace lines are blank lines
    ("x,y\r1,2\r3,4\r", [[1, 2], [3, 4]], ("x", "y")),  # CR-only line endings
    ('# tip, "open\nx,y\n1,2\n3,4\n', [[1, 2], [3, 4]], ("x", "y")),  # a comment's quote opens no field
    ("nan,inf\n1,2\n3,4\n", [[1, 2], [3, 4]], ("nan", "inf")),  # no finite number: a header, whatever its names
    ('"1","2"\n1,2\n3,4\n', [[1, 2], [3, 4]], ("1", "2")),  # quoted fields are text
    # refused (the message instead of the rows): the header rule reads the first row only, NaN and inf are data
    ("x y\ninf -inf\n1 2\n3 4\n", "line 2, column 1: inf is not a finite number", None),
    ("1,nan\n3,4\n5,6\n", "line 1, column 2: nan is not a finite number", None),  # a number beside it: data
    ("id,2019,2020\n1,2,3\n", "line 1, column 1: 'id' is not a number.*none of its fields is a finite number", None),
])
def test_the_first_row_is_a_header_only_when_none_of_its_fields_is_a_number(tmp_path, text, rows, names):
    path = tmp_path / "p.csv"
    path.write_text(text, newline="")
    if isinstance(rows, str):
        with pytest.raises(DataError, match=rows):
            read_points(path)
        return
    got = read_points(path, columns=("0", "1") if "a" in text.split("\n")[0] else None)
    assert got.values.tolist() == rows and got.names == names


# ---- --columns: names, indices and the explicit forms -----------------------------------------------------------

def test_columns_by_name_or_index(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(_text(POINTS, header=("a", "b", "c")))
    got = read_points(path, columns=("c", "a"))
    assert np.array_equal(got.values, POINTS[:, [2, 0]]) and got.names == ("c", "a")
    assert np.array_equal(read_points(path, columns=("1", "2")).values, POINTS[:, 1:])
    with pytest.raises(DataError, match="no column 'z'.*a, b, c"):
        read_points(path, columns=("a", "z"))
    with pytest.raises(DataError, match="out of range"):
        read_points(path, columns=("3",))
    path.write_text(_text(POINTS))  # no header: the columns are x0, x1, x2
    assert read_points(path, columns=("2", "0")).names == ("x2", "x0")
    assert parse_columns(" x , y ") == ("x", "y")  # as written on the command line


@pytest.mark.parametrize(("text", "message"), [
    ("", "comma-separated"), ("a,,b", "comma-separated"), ("0,0,", "comma-separated"), (" , ", "comma-separated"),
    ("name:", "names no column"), ("x,name:", "names no column"), ("index:x", "is not an index"),
    ("index:-1", "is not an index"), ("x,y,x", "must not repeat a column"),
])
def test_a_malformed_columns_option_is_a_usage_error(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_columns(text)


def test_columns_take_an_explicit_form_for_names_and_for_indices(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('"1","0",z\n10,20,30\n40,50,60\n')  # quoted names that look like indices
    assert read_points(path, columns=("name:1", "name:0")).values.tolist() == [[10, 20], [40, 50]]
    assert read_points(path, columns=("index:1", "index:0")).values.tolist() == [[20, 10], [50, 40]]
    assert read_points(path, columns=("z", "index:0")).values.tolist() == [[30, 10], [60, 40]]
    with pytest.raises(DataError, match=r"`columns` 1 could mean the column named '1' \(index 0\) or index 1; write "
                                        r"name:1 or index:1"):
        read_points(path, columns=("1", "z"))
    with pytest.raises(DataError, match="picks column 0 twice"):
        read_points(path, columns=("name:1", "index:0"))


def test_a_name_the_header_repeats_is_refused_with_the_indices(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("x,x,y\n1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match=r"names 2 columns 'x' \(indices 0, 1\); pick one by index"):
        read_points(path, columns=("x", "y"))
    assert read_points(path, columns=("0", "y")).values.tolist() == [[1, 3], [4, 6]]


def test_columns_not_picked_may_hold_text(tmp_path):
    path = tmp_path / "iris.csv"
    path.write_text("a,b,species\n1,2,setosa\n3,4,virginica\n5,6,setosa\n")
    got = read_points(path, columns=("b", "a"))
    assert np.array_equal(got.values, [[2, 1], [4, 3], [6, 5]]) and got.names == ("b", "a")
    path.write_text("a,b,species\n1,2,setosa\n3,x,virginica\n")
    with pytest.raises(DataError, match="line 3, column 2: 'x' is not a number"):
        read_points(path, columns=("a", "b"))
    path.write_text("1 2 z\n3 4\n5 6 z\n")
    with pytest.raises(DataError, match="line 2: 2 values where the first row has 3"):
        read_points(path, columns=("0", "1"))
    path.write_text("a b c\n1 2 z\n3 4 5\n")
    with pytest.raises(DataError, match="line 2, column 3: 'z' is not a number"):
        read_points(path)
    assert np.array_equal(read_points(path, columns=("a", "b")).values, [[1, 2], [3, 4]])


# ---- bad files: refused with the problem and its place ----------------------------------------------------------

BAD_TEXT = {
    "ragged": ("1,2\n3,4\n5\n", "line 3: 1 values where the first row has 2"),
    "ragged-long": ("1 2\n3 4 5\n", "line 2: 3 values where the first row has 2"),
    "nan-before-text": ("1,2\nnan,3\n,4\n", "line 2, column 1: nan is not a finite number"),
    "digit-separator": ("1,2\n1_0,3\n", "line 2, column 1: '1_0' is not a number"),
    "other-script-digits": ("1,2\n\uff15,3\n", "line 2, column 1: '\uff15' is not a number"),
    "one-point": ("x,y\n1,2\n", "holds 1 point"),
    "header-only": ("x,y\n", "a header but no data rows"),
    "empty": ("", "is empty"),
    "blank": ("\n  \n\n", "is empty"),
    "comments-only": ("# nothing\n# here\n", "no data rows"),
    "empty-name": ("x,,z\n1,2,3\n4,5,6\n", "empty column name"),
}


@pytest.mark.parametrize("case", list(BAD_TEXT))
def test_bad_text_files_are_refused_with_the_place(tmp_path, case):
    text, message = BAD_TEXT[case]
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        read_points(path)
    assert message in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(("array", "message"), [
    (np.array([[1.0, np.nan], [2.0, 3.0]]), "row 1, column 2: nan is not a finite number"),
    (np.array([[1.0, 2.0]]), "holds 1 point"),
    (np.zeros((0, 2)), "holds 0 point"),
    (np.zeros((3, 2, 2)), "shape (3, 2, 2)"),
    (np.array([["a", "b"], ["c", "d"]]), "not numbers"),
    (np.zeros((3, 0)), "no columns"),
])
def test_bad_arrays_are_refused(tmp_path, array, message):
    np.save(tmp_path / "bad.npy", array)
    with pytest.raises(DataError, match=None) as err:
        read_points(tmp_path / "bad.npy")
    assert message in str(err.value)


@pytest.mark.parametrize("content", [b"\x93NUMPY\x01\x00garbage", b"PK\x03\x04garbage", b"\x89HDF\r\n\x1a\ngarbage",
                                     b"\xff\xfe\x00\x81binary"])
def test_damaged_or_binary_files_are_refused(tmp_path, content):
    path = tmp_path / "bad.dat"
    path.write_bytes(content)
    with pytest.raises(DataError, match="bad.dat"):
        read_points(path)


def test_missing_unreadable_and_folder_paths_are_refused(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_points(tmp_path / "nope.csv")
    with pytest.raises(DataError, match="is a folder"):
        read_points(tmp_path)
    locked = tmp_path / "locked.csv"
    locked.write_text(_text(POINTS))
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as a user who can read any file (root)")
        with pytest.raises(DataError, match="not readable"):
            read_points(locked)
    finally:
        locked.chmod(0o644)


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize(("name", "members", "key", "message"), [
    ("a.zip", {"p.csv": "1,2\n3,4\n"}, None, "a zip archive, not an .npz file"),
    ("b.xlsx", {"[Content_Types].xml": "<x/>", "xl/workbook.xml": "<w/>"}, None, "a zip archive, not an .npz file"),
    ("b.xlsx", {"[Content_Types].xml": "<x/>", "xl/workbook.xml": "<w/>"}, "xl/workbook.xml", "not an .npz file"),
    ("c.zip", {"a.npy": b"\x93NUMPY garbage"}, None, "not a readable .npz file"),
    ("d.npz", {}, None, "holds no arrays"),
])
def test_archives_that_are_not_npz_files_are_refused(tmp_path, name, members, key, message):
    with pytest.raises(DataError) as err:
        read_points(_zip(tmp_path / name, members), key=key)
    assert message in str(err.value)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "link"])
def test_a_device_file_is_refused_without_reading_it(tmp_path, monkeypatch, device):
    """An endless device is refused from what it is, before a byte is read: with the most a reader takes lowered
    to 1 MiB, one that read it would refuse its bytes as binary or stop at that cap, and name no device file."""
    monkeypatch.setattr(points_module, "max_input_bytes", lambda: 1 << 20)
    if device == "link":
        device = tmp_path / "points.csv"
        device.symlink_to("/dev/zero")
    with pytest.raises(DataError, match="is a device file"):
        read_points(device)


def test_a_closed_standard_input_is_named_in_process(monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(DataError, match="standard input is closed"):
        read_points("-")


def test_an_endless_binary_stream_is_refused_at_its_first_bytes(monkeypatch):
    """A stream of zero bytes (``cat /dev/zero | swarmctl cluster -``) is refused after its first block,
    not read until memory runs out (here it ends after 64 MiB, so that a reader that does not stop fails
    the test instead of the machine)."""
    class Zeros(io.RawIOBase):
        given = 0

        def readable(self):
            return True

        def readinto(self, b):
            if Zeros.given >= 64 << 20:
                return 0
            b[:] = bytes(len(b))
            Zeros.given += len(b)
            return len(b)

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Zeros())))
    with pytest.raises(DataError, match="neither text nor"):
        read_points("-")
    assert Zeros.given <= 1 << 20


def test_an_endless_text_stream_is_refused_once_it_passes_the_cap(monkeypatch):
    """``yes 1,2 | swarmctl cluster -``: text without end is read up to a cap, then refused in one line."""
    import swarmctl.data.points as points

    class Rows(io.RawIOBase):
        given = 0

        def readable(self):
            return True

        def readinto(self, b):
            if Rows.given >= 64 << 20:  # a reader without a cap fails the test, not the machine
                return 0
            line = b"1,2\n" * (len(b) // 4)
            b[:len(line)] = line
            Rows.given += len(line)
            return len(line)

    monkeypatch.setattr(points, "max_input_bytes", lambda: 8 << 20)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Rows())))
    with pytest.raises(ResourceError, match="never ends"):
        read_points("-")
    assert Rows.given <= 10 << 20


@pytest.mark.parametrize("rows", [3, 30_000])  # a few lines: a short row; many: past the csv module's field limit
def test_a_quote_left_open_is_named_at_the_line_it_opens(tmp_path, rows):
    path = tmp_path / "p.csv"
    path.write_bytes(b'x,y,label\n1,2,a\n3,"4,b\n' + b"5,6,c\n" * rows)
    with pytest.raises(DataError, match=r"p\.csv, line 3: .*check (the file's|its) quotes"):
        read_points(path, columns=("x", "y"))


def test_an_npy_whose_header_claims_a_billion_rows_is_a_damaged_file(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.random.default_rng(0).normal(size=(300, 2)))
    path.write_bytes(_with_shape(path.read_bytes(), "(1000000000, 2)"))
    assert len(path.read_bytes()) < 8000
    with pytest.raises(DataError) as err:
        read_points(path)
    assert "damaged" in str(err.value) and "memory" not in str(err.value)


def _with_shape(raw: bytes, shape: str) -> bytes:
    """An .npy file's bytes with its header's shape replaced (the header padded to its old length)."""
    start = raw.index(b"{")
    end = raw.index(b"\n", start)
    header = raw[start:end].decode().replace("(300, 2)", shape)
    return raw[:start] + header.ljust(end - start).encode() + raw[end:]


def test_an_hdf5_dataset_larger_than_memory_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A dataset whose size (from its metadata) exceeds the machine's memory is refused; it is never read (a
    lazily allocated dataset of 16 GB, nothing of it written)."""
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("points", shape=(2**30, 2), dtype="f8", chunks=(1024, 2))
    read = []
    monkeypatch.setattr(h5py.Dataset, "__getitem__", lambda self, key: read.append(key))
    with pytest.raises(ResourceError) as err:
        read_points(path)
    assert "memory" in str(err.value) and "GiB" in str(err.value) and not read


def test_a_place_is_the_files_line_and_column_whatever_is_wrong_there(tmp_path):
    """One convention for every message: the line an editor shows (comments, blank lines and the header
    counted) and the file's column, both from 1."""
    path = tmp_path / "p.csv"
    head = "# points\nid,x,y\n\n1,0.5,2\n"
    for cell, message in [("nan", "nan is not a finite number"), ("-inf", "-inf is not a finite number"),
                          ("", "an empty value is not a number"), ("abc", "'abc' is not a number")]:
        path.write_text(head + f"2,1.5,{cell}\n3,2.5,1\n")
        with pytest.raises(DataError, match=f"^{re.escape(str(path))}, line 5, column 3: {re.escape(message)}"):
            read_points(path, columns=("x", "y"))
    np.save(tmp_path / "p.npy", np.array([[1.0, 2.0, 3.0], [4.0, 5.0, np.inf]]))  # an array has rows, not lines
    with pytest.raises(DataError, match="row 2, column 3: inf is not a finite number"):
        read_points(tmp_path / "p.npy", columns=("0", "2"))


@pytest.mark.parametrize("text", ["x;y\n1,5;2,5\n3,5;4\n4,25;1\n", "1;2\n3;4\n5;6\n", "a;b;c\n1;2;3\n4;5;6\n"])
def test_a_semicolon_separated_file_is_named_as_such_with_the_fix(tmp_path, text):
    path = tmp_path / "eu.csv"
    path.write_text(text)
    width = text.split("\n")[0].count(";") + 1
    with pytest.raises(DataError, match=f"looks like `;`-separated \\({width} fields per line at `;`\\).*tr ';,' ',.'"):
        read_points(path)


def test_a_file_that_reads_or_fails_for_another_reason_gets_no_semicolon_hint(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("x,y,note\n1,2,a;b\n3,4,c;d\n")  # a `;` in a text cell of every row: a CSV all the same
    assert read_points(path, columns=("x", "y")).values.tolist() == [[1, 2], [3, 4]]
    path.write_text("x,y,note\n1,2,a;b\n3,zz,c;d\n")
    with pytest.raises(DataError, match="line 3, column 2: 'zz' is not a number") as err:
        read_points(path, columns=("x", "y"))
    assert "looks like" not in str(err.value)


# ---- the output CSV: every column and cell as the user wrote it -------------------------------------------------

def test_skip_bad_rows_leaves_out_rows_without_a_finite_number_in_the_picked_columns(tmp_path):
    values = np.array([[1.0, 2.0, 7.0], [np.nan, 3.0, 8.0], [4.0, 5.0, np.nan], [6.0, np.inf, 9.0], [0.5, 1.5, 2.5]])
    np.save(tmp_path / "p.npy", values)
    with pytest.raises(DataError, match="`skip_bad_rows`"):
        read_points(tmp_path / "p.npy", columns=("0", "1"))
    got = read_points(tmp_path / "p.npy", columns=("0", "1"), skip_bad_rows=True)
    assert got.skipped == 2 and got.values.tolist() == [[1, 2], [4, 5], [0.5, 1.5]]  # NaN beyond the pick: kept
    (tmp_path / "p.txt").write_text("a b c\n1 2 x\n3 4\n5 six 7\n8 9 y,z\n")
    got = read_points(tmp_path / "p.txt", columns=("a", "b"), skip_bad_rows=True)
    assert got.skipped == 2 and got.values.tolist() == [[1, 2], [8, 9]]
    out = tmp_path / "o.csv"
    write_cluster_csv(out, got, np.array([0, 1]), np.array([1.0, 0.5]), np.array([0.0, 0.7]))
    with open(out) as fh:
        rows = list(csv.reader(fh))
    assert rows == [["a", "b", "c", "cluster", "probability", "entropy"], ["1", "2", "x", "0", "1", "0"],
                    ["8", "9", "y,z", "1", "0.5", "0.7"]]  # every column kept as written


@pytest.mark.parametrize("form", ["csv", "npy"])
def test_whole_numbers_past_2_53_are_read_less_an_exact_integer_and_written_back_as_they_were(tmp_path, form):
    """float64 holds only every 1024th integer near 2^62 (2^62 + 1 and 2^62 + 2 are one float64): such a column
    is read less its smallest number, exactly, so that the differences survive; the names say by how much, and
    the output carries the file's numbers."""
    big = [[2**62 + 1, 5], [2**62 + 2, 6], [2**62 + 1030, 7]]
    path = tmp_path / f"p.{form}"
    if form == "npy":
        np.save(path, np.array(big, dtype=np.int64))
    else:
        path.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in big))
    got = read_points(path)
    assert got.values.tolist() == [[0, 5], [1, 6], [1029, 7]] and got.offset == (2**62 + 1, 0)
    assert got.shown_names == ((f"x - {2**62 + 1}", "y") if form == "csv" else (f"x0 - {2**62 + 1}", "x1"))
    write_cluster_csv(tmp_path / "o.csv", got, np.zeros(3, dtype=int), np.ones(3), np.zeros(3))
    with open(tmp_path / "o.csv") as fh:
        assert [list(map(int, row[:2])) for row in list(csv.reader(fh))[1:]] == big


def _clustered(tmp_path, source, columns=None):
    """The points of ``source`` (a text, or an array saved as .npy) and the rows of their output CSV (every
    point in cluster 0, an entropy of minus zero), read by the csv module."""
    path = tmp_path / ("in.csv" if isinstance(source, str) else "in.npy")
    path.write_text(source, newline="") if isinstance(source, str) else np.save(path, source)
    got = read_points(path, columns=columns)
    n = len(got)
    write_cluster_csv(tmp_path / "out.csv", got, np.zeros(n, dtype=int), np.ones(n), np.full(n, -0.0))
    with open(tmp_path / "out.csv", newline="") as fh:
        return got, list(csv.reader(fh))


@pytest.mark.parametrize(("source", "columns", "values", "header", "cells"), [
    ("id,x,y\n007,007,1e3\nA-2,2.50,-0\n", ("x", "y"), [[7, 1000], [2.5, 0]], ["id", "x", "y"],
     [["007", "007", "1e3"], ["A-2", "2.50", "-0"]]),  # each cell as written
    ('x,y,name\n1,2,"a, b"\n3,4,"say ""hi"""\n5,1,plain\n', ("x", "y"), [[1, 2], [3, 4], [5, 1]], ["x", "y", "name"],
     [["1", "2", "a, b"], ["3", "4", 'say "hi"'], ["5", "1", "plain"]]),  # decoded, quoted again
    ('a,"b,c",d\n1,2,3\n4,5,6\n', None, [[1, 2, 3], [4, 5, 6]], ["a", "b,c", "d"], [["1", "2", "3"], ["4", "5", "6"]]),
    (np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), ("2", "0"), [[3, 1], [6, 4]], ["x0", "x1", "x2"],
     [["1.0", "2.0", "3.0"], ["4.0", "5.0", "6.0"]]),  # the columns not picked keep their place
])
def test_the_output_carries_every_column_and_cell_as_the_file_writes_them(tmp_path, source, columns, values, header,
                                                                         cells):
    """The output CSV reads back (by the csv module and by swarmctl) to the file's own columns and cells, then
    the cluster, its probability and the entropy (minus zero written as 0)."""
    got, rows = _clustered(tmp_path, source, columns)
    assert got.values.tolist() == values
    assert rows == [[*header, "cluster", "probability", "entropy"], *([*c, "0", "1", "0"] for c in cells)]
    back = read_points(tmp_path / "out.csv", columns=("cluster", "probability"))
    assert back.columns == (*header, "cluster", "probability", "entropy") and back.cells[:, :-3].tolist() == cells


def test_a_quoted_field_may_hold_line_breaks_and_lines_are_still_counted(tmp_path):
    text = 'x,y,label\n1,2,"two\nlines"\n3,4,"say ""hi""\r\nthere"\n5,6,c\n'
    got, rows = _clustered(tmp_path, text, columns=("x", "y"))
    assert got.values.tolist() == [[1, 2], [3, 4], [5, 6]]
    assert got.lines.tolist() == [2, 4, 6]  # where each record starts, as an editor numbers the lines
    assert [r[2] for r in rows[1:]] == ["two\nlines", 'say "hi"\r\nthere', "c"]  # read back as written
    path = tmp_path / "bad.csv"
    for bad, message in [(text + "7,x,d\n", "line 7, column 2: 'x' is not a number"),
                         (text + "7,nan,d\n", "line 7, column 2: nan is not a finite number"),
                         # a quote left open takes the rest of the file into its field: the message says so
                         (text + '7,"8,d\n9,10,e\n', "line 7: 2 values where the first row has 3 (a quoted field "
                                                        "runs on to line 8: check its quotes)")]:
        path.write_text(bad, newline="")
        with pytest.raises(DataError) as err:
            read_points(path, columns=("x", "y"))
        assert message in str(err.value)


def test_a_hash_inside_a_cell_is_kept_and_a_comment_is_a_line_of_its_own(tmp_path):
    text = ('# exported\n  # indented comment\nx,y,label\n1,2,"a #1"\n3,4,b #2\n'
            '# between\n5,6,"#3"\n')
    got, rows = _clustered(tmp_path, text, columns=("x", "y"))
    assert got.values.tolist() == [[1, 2], [3, 4], [5, 6]] and got.lines.tolist() == [4, 5, 7]
    assert [r[2] for r in rows[1:]] == ["a #1", "b #2", "#3"]
    path = tmp_path / "back.csv"
    path.write_text((tmp_path / "out.csv").read_text())  # the output reads back, its cells unchanged
    assert read_points(path, columns=("x", "y")).cells[:, 2].tolist() == ["a #1", "b #2", "#3"]
    path.write_text("x,y\n1,2 # a note\n")  # a # after a value: part of the cell, which is not a number
    with pytest.raises(DataError, match="line 2, column 2: '2 # a note' is not a number.*a # starts a comment only "
                                        "at the start of a line$"):
        read_points(path)

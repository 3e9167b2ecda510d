"""Generated point files for `swarmctl cluster`: headers, comments, blank and whitespace lines and every
line ending in the first rows and between them, a label column, every reader (CSV, whitespace text,
.npy, .npz, HDF5, standard input, a named pipe); --columns by name, by index and in its explicit forms;
archives that are not .npz, device files, a closed or endless standard input. The promise: the rows read
are the data rows of the file, one to one and in order, by the header rule the README states, or the
file is refused in one line naming the place."""

from __future__ import annotations

import io
import os
import random
import re
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from faults import assert_clean_failure, cli, deadline, snapshot

from swarmctl.data.points import parse_columns, read_points
from swarmctl.errors import ConfigError, DataError, ResourceError

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


# ---- the header rule --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "rows", "names"), [
    ("1,2,a\n3,4,b\n5,6,c\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),  # a label in the first row: still data
    ("# first\n1,2\n3,4\n5,6\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),  # a comment before the first row
    ("1 2\n  # between\n3 4\n5 6\n", [[1, 2], [3, 4], [5, 6]], ("x0", "x1")),
    ("x,y\n# the header\n1,2\n3,4\n", [[1, 2], [3, 4]], ("x", "y")),
    ("x,y\n\n  \n1,2\n\t\n3,4\n", [[1, 2], [3, 4]], ("x", "y")),  # whitespace lines are blank lines
    ("x,y\r1,2\r3,4\r", [[1, 2], [3, 4]], ("x", "y")),  # CR-only line endings
    ("1;2\n3;4\n", None, None),  # not a format swarmctl reads: refused, naming what it looks like
    ("nan,inf\n1,2\n3,4\n", [[1, 2], [3, 4]], ("nan", "inf")),  # no finite number: a header, whatever its names
    ("x y\ninf -inf\n1 2\n3 4\n", None, None),  # the header rule reads the first row only: NaN, inf are data
    ('"1","2"\n1,2\n3,4\n', [[1, 2], [3, 4]], ("1", "2")),  # quoted fields are text
    ("1,nan\n3,4\n5,6\n", None, None),  # a number beside it: data, refused as not finite
])
def test_the_first_row_is_a_header_only_when_none_of_its_fields_is_a_number(tmp_path, text, rows, names):
    path = tmp_path / "p.csv"
    path.write_text(text, newline="")
    if rows is None:
        message = {"1;2": r"looks like `;`-separated \(2 fields per line", "x y": "line 2, column 1: inf is not a "
                   "finite number", "1,nan": "line 1, column 2: nan is not a finite number"}[text.split("\n")[0][:5]]
        with pytest.raises(DataError, match=message):
            read_points(path)
        return
    got = read_points(path, columns=("0", "1") if "a" in text.split("\n")[0] else None)
    assert got.values.tolist() == rows and got.names == names


def test_a_header_with_a_number_in_it_is_data_and_the_message_says_the_rule(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,2019,2020\n1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match=r"line 1, column 1: 'id' is not a number.*none of its fields is a finite "
                                        r"number"):
        read_points(path)


# ---- --columns: names, indices and the explicit forms -------------------------------------------------------

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


@pytest.mark.parametrize("text", ["name:", "index:x", "index:-1", "x,name:"])
def test_malformed_explicit_columns_are_usage_errors(text):
    with pytest.raises(ConfigError, match="columns"):
        parse_columns(text)


def test_a_name_the_header_repeats_is_refused_with_the_indices(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("x,x,y\n1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match=r"names 2 columns 'x' \(indices 0, 1\); pick one by index"):
        read_points(path, columns=("x", "y"))
    assert read_points(path, columns=("0", "y")).values.tolist() == [[1, 3], [4, 6]]


@pytest.mark.parametrize("header", ["x,x,y", "a,b,c", '"1","2","3"', "x, y ,z", '"a,b",c,d', None])
def test_the_columns_a_message_suggests_are_accepted(trained_runs, tmp_path, header):
    """A file with more columns than the model takes: the --columns the message suggests works."""
    path = tmp_path / "p.csv"
    rng = np.random.default_rng(0)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rng.normal(size=(40, 3)))
    path.write_text((header + "\n" if header else "") + body + "\n")
    runs, _ = trained_runs
    args = ["cluster", path, "swarm", "--runs-dir", runs, "--device", "cpu", "--out", tmp_path / "o.csv"]
    r = cli(*args)
    assert r.exit_code == 1, r.output
    suggested = re.search(r"--columns (\S+)\)", r.output).group(1)
    r = cli(*args, "--columns", suggested)
    assert r.exit_code == 0, r.output


# ---- every reader: the rows of the output are the rows of the input ----------------------------------------

READERS = ["csv", "csv-header-comments", "whitespace-cr", "npy", "npz", "h5", "stdin", "fifo"]


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_gives_one_output_row_per_input_row_in_order(trained_runs, tmp_path, reader):
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(0, 1, (25, 2)), rng.normal(8, 1, (25, 2))]) * [3.0, 0.5] + [1e6, -7]
    values[3] = values[4]  # a repeated point keeps its place too
    source, extra, stdin = tmp_path / f"in.{reader}", [], None
    lines = [f"{float(a)!r},{float(b)!r}" for a, b in values]
    if reader == "csv":
        source.write_text("\n".join(lines) + "\n")
    elif reader == "csv-header-comments":
        source.write_text("# points\n\nlon,lat\n# degrees\n" + "\n# a break\n   \n".join(lines) + "\n")
    elif reader == "whitespace-cr":
        source.write_text("\r".join(f"{float(a)!r}  {float(b)!r}" for a, b in values) + "\r", newline="")
    elif reader == "npy":
        np.save(source, values)
    elif reader == "npz":
        np.savez(tmp_path / "in.npz", pts=values)
        source = tmp_path / "in.npz"
    elif reader == "h5":
        with h5py.File(source, "w") as f:
            f["g/pts"] = values
    elif reader == "stdin":
        source, stdin = "-", "\n".join(lines) + "\n"
    else:
        os.mkfifo(source)
        feeder = threading.Thread(target=lambda: Path(source).write_text("\n".join(lines) + "\n"), daemon=True)
        feeder.start()
    runs, _ = trained_runs
    out = tmp_path / "out.csv"
    from typer.testing import CliRunner

    from swarmctl.cli import app

    args = ["cluster", str(source), "swarm", "--runs-dir", str(runs), "--device", "cpu", "--out", str(out), *extra]
    with deadline(60):
        r = CliRunner().invoke(app, args, input=stdin, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    back = np.loadtxt(out, delimiter=",", skiprows=2)  # the comment line, the header
    assert back.shape == (len(values), 5)
    assert np.array_equal(back[:, :2], values)  # the same rows, in the same order, to the last bit


# ---- files that are not point files -----------------------------------------------------------------------

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
def test_archives_that_are_not_npz_files_are_refused(trained_runs, tmp_path, name, members, key, message):
    path = _zip(tmp_path / name, members)
    runs, _ = trained_runs
    before = snapshot(tmp_path)
    r = cli("cluster", path, "swarm", "--runs-dir", runs, "--device", "cpu",
            *(["--key", key] if key else []))
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) <= 3 and snapshot(tmp_path) == before


def test_a_device_file_is_refused_on_the_command_line(trained_runs, tmp_path):
    runs, _ = trained_runs
    with deadline(30):
        r = cli("cluster", "/dev/null", "swarm", "--runs-dir", runs, "--device", "cpu", "--out", tmp_path / "o.csv")
    assert r.exit_code == 1 and "device file" in r.output and "Traceback" not in r.output, r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "link"])
def test_a_device_file_is_refused_without_reading_it(tmp_path, device):
    """In a process whose memory is capped at 2 GiB: reading an endless device would end in MemoryError."""
    if device == "link":
        device = tmp_path / "points.csv"
        device.symlink_to("/dev/zero")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "from swarmctl.data.points import read_points\n"
            "from swarmctl.errors import DataError\n"
            "try:\n    read_points(sys.argv[1])\nexcept DataError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(device)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "device file" in proc.stdout, proc.stdout + proc.stderr[-2000:]


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


# ---- values the model cannot take as given ------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1e20, 1e30, 1e37, 3e38, 1e39, 1e300])
@pytest.mark.parametrize("standardize", [True, False])
def test_large_values_are_clustered_or_refused_never_nan(trained_runs, tmp_path, scale, standardize):
    """--no-standardize hands the values to a float32 model as they are: beyond float32 (3.4e38) they
    would be inf and every probability NaN. The CSV holds finite numbers only, or the command refuses
    in one line with nothing written."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, (20, 2)), rng.normal(5, 1, (20, 2))]) * scale
    np.save(tmp_path / "p.npy", values)
    runs, _ = trained_runs
    before = snapshot(tmp_path)
    r = cli("cluster", tmp_path / "p.npy", "swarm", "--runs-dir", runs, "--device", "cpu", "--out",
            tmp_path / "o.csv", *([] if standardize else ["--no-standardize"]))
    if r.exit_code == 0:
        back = np.loadtxt(tmp_path / "o.csv", delimiter=",", skiprows=2)  # comment, header
        assert np.isfinite(back[:, 2:]).all(), back[:5]
        assert np.array_equal(back[:, :2], values)
    else:
        assert r.exit_code == 1 and "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 3
        assert re.search("--(no-)?standardize", r.output) and snapshot(tmp_path) == before, r.output
    if standardize:
        assert r.exit_code == 0, r.output
    if not standardize and np.abs(values).max() > np.finfo(np.float32).max:
        assert r.exit_code == 1 and "float32" in r.output, r.output


# ---- quotes left open -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [3, 30_000])  # a few lines: a short row; many: past the csv module's field limit
def test_a_quote_left_open_is_named_at_the_line_it_opens(tmp_path, rows):
    path = tmp_path / "p.csv"
    path.write_bytes(b'x,y,label\n1,2,a\n3,"4,b\n' + b"5,6,c\n" * rows)
    with pytest.raises(DataError, match=r"p\.csv, line 3: .*check (the file's|its) quotes"):
        read_points(path, columns=("x", "y"))


# ---- integers beyond 2^53 keep their differences ----------------------------------------------------------

@pytest.mark.parametrize("form", ["csv", "npy"])
def test_integer_coordinates_near_2_62_cluster_as_the_same_points_shifted(trained_runs, tmp_path, form):
    """293 distinct integers near 2^62 (float64 holds only every 1024th there) cluster as the same points
    moved to near 0 by an exact integer: the low bits are kept until the points are centred."""
    runs, _ = trained_runs
    rng = np.random.default_rng(0)
    small = np.concatenate([rng.integers(0, 150, (150, 2)), rng.integers(400, 550, (150, 2))]).astype(np.int64)
    outputs = {}
    for name, base in (("near0", 0), ("huge", 2**62)):
        big = small + base
        path = tmp_path / f"{name}.{form}"
        if form == "npy":
            np.save(path, big)
        else:
            path.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in big.tolist()))
        r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / f"{name}.out.csv")
        assert r.exit_code == 0, r.output
        lines = (tmp_path / f"{name}.out.csv").read_text().splitlines()[2:]  # after the comment, the header
        outputs[name] = [line.split(",")[2] for line in lines]
        if name == "huge":  # the output carries the file's numbers exactly
            assert [tuple(map(int, line.split(",")[:2])) for line in lines] == [tuple(p) for p in big.tolist()]
    assert outputs["huge"] == outputs["near0"]


# ---- sizes a file claims, and streams without end ------------------------------------------------------------

def test_an_npy_whose_header_claims_a_billion_rows_is_a_damaged_file(trained_runs, tmp_path):
    runs, _ = trained_runs
    path = tmp_path / "big.npy"
    np.save(path, np.random.default_rng(0).normal(size=(300, 2)))
    raw = path.read_bytes()
    path.write_bytes(_with_shape(raw, "(1000000000, 2)"))
    assert len(path.read_bytes()) < 8000
    before = snapshot(tmp_path)
    r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / "o.csv")
    assert_clean_failure(r, tmp_path, before)
    assert "damaged" in r.output and "memory" not in r.output, r.output


def _with_shape(raw: bytes, shape: str) -> bytes:
    """An .npy file's bytes with its header's shape replaced (the header padded to its old length)."""
    start = raw.index(b"{")
    end = raw.index(b"\n", start)
    header = raw[start:end].decode().replace("(300, 2)", shape)
    return raw[:start] + header.ljust(end - start).encode() + raw[end:]


def test_an_hdf5_dataset_larger_than_memory_is_refused_before_it_is_read(trained_runs, tmp_path, monkeypatch):
    """A dataset whose size (from its metadata) exceeds the machine's memory is refused in one line; it is
    never read (a lazily allocated dataset of 16 GB, nothing of it written)."""
    runs, _ = trained_runs
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("points", shape=(2**30, 2), dtype="f8", chunks=(1024, 2))
    read = []
    monkeypatch.setattr(h5py.Dataset, "__getitem__", lambda self, key: read.append(key))
    before = snapshot(tmp_path)
    r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / "o.csv")
    assert_clean_failure(r, tmp_path, before)
    assert "memory" in r.output and "GiB" in r.output and not read, r.output


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


@pytest.mark.parametrize("layout", ["group", "external link", "link loop"])
def test_an_hdf5_file_lists_the_datasets_in_its_groups_and_links_by_path(trained_runs, tmp_path, layout):
    """Points kept in a group, or reached through a link: read when they are the one dataset, and named by
    their path (the --key that works) when there are several."""
    runs, _ = trained_runs
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
    r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / "o.csv")
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "o.csv").read_text().splitlines()) == 82  # the comment line, the header, 80 rows
    with h5py.File(path, "a") as f:
        f["other"] = points
    r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / "o2.csv")
    assert r.exit_code == 1 and "grp/points" in r.output and "other" in r.output, r.output


@pytest.mark.parametrize("scale", [2e307, 1e200])
def test_coordinates_near_the_end_of_float64_are_plotted_quietly(trained_runs, tmp_path, scale):
    """NumPy's overflow warning (the span of the axes) and matplotlib's tick failure never reach the user."""
    runs, _ = trained_runs
    rng = np.random.default_rng(0)
    path = tmp_path / "huge.csv"
    np.savetxt(path, np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(6, 1, (40, 2))]) * scale, delimiter=",")
    r = cli("cluster", path, runs / "swarm", "--device", "cpu", "--out", tmp_path / "o.csv", "--plot",
            tmp_path / "o.png")
    assert r.exit_code == 0 and "overflow" not in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "o.png").read_bytes()[:4] == b"\x89PNG"

"""The file rules of docs/guarantees.md, through swarmctl.files' public functions: a write is all or nothing and
synced before its name appears; a link, FIFO or folder in place of a file is refused, never written through
or waited on; a command's outputs appear together; no run's own file, lock or input is ever an output."""

import errno
import json
import os
import warnings

import pytest

from swarmctl import files
from swarmctl.errors import ConfigError, DataError, OutputExists, ResourceError, SwarmctlWarning, describe_os_error
from swarmctl.files import (
    atomic_write,
    atomic_write_text,
    check_png,
    holding,
    open_regular,
    parse_json,
    private_temp_folder,
    read_bytes,
    read_json,
    read_metrics,
    remove_orphan_temps,
    staged_outputs,
)
from swarmctl.rundir import METRICS_KEYS


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def _fail(message="the writer failed"):
    raise RuntimeError(message)


# ---- one file: atomic, synced, named in its errors -----------------------------------------------------------

def test_a_write_that_fails_midway_leaves_the_old_file_whole_and_no_temporary_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        atomic_write(path, lambda fh: (fh.write(b"half"), _fail()))
    assert path.read_text() == "old" and _names(tmp_path) == ["f.txt"]
    atomic_write_text(tmp_path / "new" / "g.txt", "new")
    assert (tmp_path / "new" / "g.txt").read_text() == "new" and _names(tmp_path / "new") == ["g.txt"]


def test_a_full_disk_names_the_file_asked_for_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    path.write_text("old")

    real = os.write

    def half_then_full(fd, data):
        if len(data) > 2:
            return real(fd, data[:2])  # a partial write, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError, match="No space") as err:
        atomic_write_text(path, "new")
    assert err.value.filename == str(path)
    monkeypatch.undo()
    assert path.read_text() == "old" and _names(tmp_path) == ["f.txt"]


def test_a_name_too_long_or_a_file_in_the_path_is_told_with_its_fix(tmp_path):
    with pytest.raises(OSError) as err:
        atomic_write_text(tmp_path / ("x" * 300), "new")
    assert describe_os_error(err.value).endswith("file name too long; choose a shorter path")
    assert _names(tmp_path) == []
    (tmp_path / "f.txt").write_text("f")
    with pytest.raises(OSError) as err:
        (tmp_path / "f.txt" / "g.txt").read_text()
    assert describe_os_error(err.value).endswith("a part of the path is a file, not a folder; choose another path")


def test_the_temporary_file_is_synced_before_it_takes_the_name(tmp_path, monkeypatch):
    """fsync of the content before the rename, then of the folder (a power cut leaves the old file or the new
    one, never a file whose name is on the disk and whose content is not)."""
    events, real_fsync, real_replace = [], os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", os.path.realpath(src), os.path.realpath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "f.txt"
    path.write_text("old")
    atomic_write_text(path, "new")
    renames = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == os.path.realpath(path)]
    assert len(renames) == 1, events
    tmp = events[renames[0]][1]
    assert ("fsync", tmp) in events[:renames[0]], events  # the content first
    assert ("fsync", os.path.realpath(tmp_path)) in events[renames[0]:], events  # then the folder holding the new name
    assert path.read_text() == "new"


# ---- what is never written -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "dangling"])
def test_a_link_fifo_or_folder_in_place_of_an_output_is_refused_and_left_alone(tmp_path, kind):
    outside, path = tmp_path / "outside.txt", tmp_path / "out.txt"
    outside.write_text("not ours")
    {"symlink": lambda: path.symlink_to(outside), "fifo": lambda: os.mkfifo(path), "folder": path.mkdir,
     "dangling": lambda: path.symlink_to(tmp_path / "nowhere")}[kind]()
    log = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    for write in (lambda: atomic_write_text(path, "x"), lambda: os.close(open_regular(path, log, "a log file"))):
        with pytest.raises(ResourceError) as refused:
            write()
        what = {"fifo": "a FIFO", "folder": "a folder"}.get(kind, "a symbolic link")
        assert str(refused.value).startswith(f"cannot write {path}: it is {what}"), refused.value  # not "read"
    assert outside.read_text() == "not ours" and not (tmp_path / "nowhere").exists()
    assert sorted(_names(tmp_path)) == ["out.txt", "outside.txt"]


def test_an_output_under_a_file_or_in_a_read_only_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ResourceError, match="is a file, not a folder"):
        atomic_write(tmp_path / "file" / "sub" / "out.txt", lambda fh: _fail())
    (tmp_path / "ro").mkdir(mode=0o500)
    if os.access(tmp_path / "ro", os.W_OK):
        pytest.skip("running as root: every folder is writable")
    with pytest.raises(ResourceError, match="not writable"):
        atomic_write(tmp_path / "ro" / "out.txt", lambda fh: _fail())


def test_an_input_a_lock_a_runs_own_file_or_a_shipped_model_is_never_an_output(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (tmp_path / "in.txt").write_text("input")
    os.link(tmp_path / "in.txt", tmp_path / "same.txt")
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(tmp_path / "shipped"))
    refused = {tmp_path / "same.txt": "input", tmp_path / "x" / ".lock": "lock",
               run / "metrics.jsonl": "file of the run", tmp_path / "shipped" / "m.pt": "shipped models"}
    for path, why in refused.items():
        with pytest.raises(ResourceError, match=why), staged_outputs([tmp_path / "in.txt"]) as outputs:
            outputs.file(path)
    with pytest.raises(ResourceError, match="input"), staged_outputs() as outputs:  # an input named later
        outputs.file(tmp_path / "in.txt")
        outputs.input(tmp_path / "in.txt")
    with holding(run):  # the run's one writer may write its files
        atomic_write_text(run / "metrics.jsonl", "")
    assert _names(tmp_path) == ["in.txt", "run", "same.txt"] and (tmp_path / "in.txt").read_text() == "input"


# ---- --force, and a file that appears meanwhile --------------------------------------------------------------

def _a_name_taken_meanwhile_is_kept(path):
    """Another process creates ``path`` while a write without replace runs: theirs stays, ours goes."""
    def competitor(fh):
        path.write_text("theirs")
        fh.write(b"ours")

    with pytest.raises(OutputExists, match="appeared while this command ran"):
        atomic_write(path, competitor, replace=False)
    assert path.read_text() == "theirs" and _names(path.parent) == ["out.txt"]


def test_without_replace_an_existing_file_or_one_that_appears_meanwhile_is_kept(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("theirs")
    with pytest.raises(OutputExists, match="exists"):
        atomic_write(path, lambda fh: _fail("the work ran"), replace=False)
    path.unlink()
    _a_name_taken_meanwhile_is_kept(path)
    atomic_write_text(path, "ours")  # replace: the default outside a block
    assert path.read_text() == "ours"


@pytest.mark.parametrize("code", [errno.EPERM, errno.EXDEV])
def test_where_the_file_system_has_no_hard_links_a_new_output_is_still_written_and_none_replaced(
        tmp_path, monkeypatch, code):
    def no_links(src, dst, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", no_links)  # as on a file system without hard links
    path = tmp_path / "out.txt"
    atomic_write_text(path, "ours")  # replace: no link needed
    path.unlink()
    atomic_write(path, lambda fh: fh.write(b"ours"), replace=False)
    assert path.read_text() == "ours" and _names(tmp_path) == ["out.txt"]
    path.unlink()
    _a_name_taken_meanwhile_is_kept(path)


# ---- a command's outputs: all or none ------------------------------------------------------------------------

def test_outputs_appear_together_when_the_block_ends(tmp_path):
    with staged_outputs() as outputs:
        atomic_write_text(outputs.file(tmp_path / "a" / "one.txt"), "1")
        atomic_write_text(outputs.file(tmp_path / "two.txt"), "2")
        assert [n for n in _names(tmp_path) if not n.startswith(".")] == ["a"]  # only temporary files yet
        assert not (tmp_path / "a" / "one.txt").exists()
    assert (tmp_path / "a" / "one.txt").read_text() == "1" and (tmp_path / "two.txt").read_text() == "2"
    assert _names(tmp_path) == ["a", "two.txt"]  # no temporary file


def test_a_block_that_fails_leaves_no_new_file_or_folder(tmp_path):
    (tmp_path / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_outputs() as outputs:
        atomic_write_text(outputs.file(tmp_path / "a" / "b" / "one.txt"), "1")
        atomic_write_text(outputs.file(tmp_path / "old.txt"), "2")
        _fail("the third output failed")
    assert _names(tmp_path) == ["old.txt"] and (tmp_path / "old.txt").read_text() == "old"


def test_a_block_whose_last_output_appeared_meanwhile_removes_the_ones_it_published(tmp_path):
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    with pytest.raises(OutputExists), staged_outputs(replace=False) as outputs:
        atomic_write_text(outputs.file(first), "ours")
        atomic_write_text(outputs.file(second), "ours")
        second.write_text("theirs")  # another process, after the checks
    assert _names(tmp_path) == ["second.txt"] and second.read_text() == "theirs"


def test_check_png_names_the_parameter():
    assert check_png(None, "plot") is None and str(check_png("x.PNG", "plot")) == "x.PNG"
    with pytest.raises(ConfigError, match="x.jpg does not end in .png; `plot` is a PNG file"):
        check_png("x.jpg", "plot")


# ---- logs, orphans, private folders ---------------------------------------------------------------------------

def test_orphan_temporary_files_of_dead_writers_are_removed(tmp_path):
    dead, live, other = (tmp_path / ".f.txt.999999999-x.tmp", tmp_path / f".f.txt.{os.getpid()}-y.tmp",
                         tmp_path / "keep.txt")
    for path in (dead, live, other):
        path.write_text("x")
    remove_orphan_temps(tmp_path)
    assert _names(tmp_path) == [live.name, "keep.txt"]  # a live writer's file stays
    remove_orphan_temps(tmp_path, held=True)  # the lock's holder: every temporary file is an orphan
    assert _names(tmp_path) == ["keep.txt"]


def test_a_planted_shared_temp_folder_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(files.tempfile, "tempdir", str(tmp_path))
    mine = private_temp_folder("cache")
    assert mine == tmp_path / f"swarmctl-{os.getuid()}" / "cache" and mine.stat().st_mode & 0o777 == 0o700
    os.chmod(mine, 0o777)  # as if another user made it, open to all
    other = private_temp_folder("cache")
    assert other != mine and other.is_dir() and other.stat().st_mode & 0o077 == 0


# ---- readers ---------------------------------------------------------------------------------------------------

def test_a_fifo_is_refused_by_a_reader_at_once_and_a_link_is_followed(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # no writer: opening it to read would wait for ever
    with pytest.raises(ResourceError, match="^cannot read .*: it is a FIFO .*; replace it with the file$"):
        read_bytes(tmp_path / "fifo")  # an input: the fix is the file, not "remove it" (the user's FIFO)
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_bytes(tmp_path / "link") == b"data"  # links are followed on reads


@pytest.mark.parametrize("content", [None, b"", b"{", b"\xff{}", b'{"a": NaN}', b"[1e999]", b'{"a": -Infinity}'],
                         ids=["missing", "empty", "cut", "not-utf8", "nan", "overflow", "infinity"])
def test_read_json_refuses_a_bad_file_in_one_line_naming_it(tmp_path, content):
    path = tmp_path / "record.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_json(path, "a record")
    message = str(err.value)
    assert str(path) in message and "\n" not in message and ";" in message  # the problem; the fix


def test_read_json_reads_json_and_refuses_a_folder(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": [1, 2.5, "x"]}')
    assert read_json(tmp_path / "ok.json", "a record") == {"a": [1, 2.5, "x"]}
    (tmp_path / "nan.json").write_text("[NaN]")
    assert read_json(tmp_path / "nan.json", "a record", finite=False)[0] != 0  # NaN kept where asked
    with pytest.raises(DataError, match="is a folder"):
        read_json(tmp_path, "a record")
    with pytest.raises(DataError, match=r"^member x\.json is not valid JSON \(NaN is not a finite number\); "):
        parse_json(b'{"a": [NaN]}', "member x.json")  # bytes, as from an archive


def test_a_damaged_metrics_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(path) == []
    good = json.dumps(dict.fromkeys(METRICS_KEYS, 1))
    path.write_text(f"{good}\n\n{good[:-9]}\n[1]\n{good}\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(read_metrics(path)) == 2
    assert [str(w.message) for w in caught if w.category is SwarmctlWarning] == [
        f"{path}: skipped 2 damaged line(s) (3, 4)"]

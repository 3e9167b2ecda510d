"""files.staged_outputs: a command's outputs are checked when named, before any work, and written all or none."""

from pathlib import Path

import pytest

from swarmctl.errors import ConfigError, DataError, OutputExists, ResourceError
from swarmctl.files import atomic_write_text, check_png, parse_json, read_json, staged_outputs


def test_outputs_are_checked_when_named_and_published_together(tmp_path):
    (tmp_path / "old.txt").write_text("old")
    with pytest.raises(OutputExists), staged_outputs(replace=False) as outputs:
        outputs.file(tmp_path / "old.txt")  # an existing file without replace: refused before any work
        raise AssertionError("the work ran")
    (tmp_path / "in.txt").write_text("input")
    with pytest.raises(ResourceError, match="input"), staged_outputs() as outputs:
        outputs.input(tmp_path / "in.txt")
        outputs.file(tmp_path / "in.txt")
    with pytest.raises(RuntimeError), staged_outputs() as outputs:
        atomic_write_text(outputs.file(tmp_path / "a" / "one.txt"), "1")
        raise RuntimeError("the second output failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "old.txt"]  # nothing, not even the folder
    with staged_outputs() as outputs:
        atomic_write_text(outputs.file(tmp_path / "a" / "one.txt"), "1")
        assert not (tmp_path / "a" / "one.txt").exists()  # published when the block ends
    assert (tmp_path / "a" / "one.txt").read_text() == "1"


def test_check_png_names_the_parameter():
    assert check_png(None, "plot") is None and str(check_png("x.PNG", "plot")) == "x.PNG"
    with pytest.raises(ConfigError, match="x.jpg does not end in .png; `plot` is a PNG file"):
        check_png("x.jpg", "plot")


def test_a_staged_group_replaces_and_removes_files_all_at_once_or_puts_them_back(tmp_path, monkeypatch):
    """A staged group that replaces one file, removes another and writes a third: on success all three
    changes appear; when publishing fails part-way, the replaced file and the removed one are back as they
    were and the new one is gone (the campaign commit depends on it)."""
    from swarmctl import files

    old, gone, new = tmp_path / "old.txt", tmp_path / "gone.txt", tmp_path / "sub" / "new.txt"

    def group():
        with files.staged_writes():
            atomic_write_text(old, "replaced\n")
            files.remove_file(gone)
            files.copy_file(old.with_name("source.txt"), new)
            assert old.read_text() == "before\n" and gone.exists() and not new.exists()  # nothing yet

    (tmp_path / "source.txt").write_text("copied\n")
    old.write_text("before\n")
    gone.write_text("still here\n")
    real = files._rename

    def full_disk(tmp, path):
        if Path(path).name == "new.txt":
            raise OSError(28, "No space left on device", str(path))
        real(tmp, path)

    monkeypatch.setattr(files, "_rename", full_disk)
    with pytest.raises(OSError, match="No space"):
        group()
    assert old.read_text() == "before\n" and gone.read_text() == "still here\n" and not new.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone.txt", "old.txt", "source.txt"]  # no temporary file

    monkeypatch.setattr(files, "_rename", real)
    group()
    assert old.read_text() == "replaced\n" and not gone.exists() and new.read_text() == "copied\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt", "source.txt", "sub"]


def test_remove_file_outside_a_group_removes_at_once_and_refuses_a_link(tmp_path):
    from swarmctl import files

    target = tmp_path / "f.txt"
    target.write_text("x")
    files.remove_file(target)
    files.remove_file(target)  # missing: no error
    assert not target.exists()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ResourceError, match="link"):
        files.remove_file(tmp_path / "link")


def test_a_log_file_is_appended_and_never_opened_through_a_link(tmp_path):
    from swarmctl import files

    log = tmp_path / "log.txt"
    for text in (b"one\n", b"two\n"):
        with files.open_log_file(log) as fh:
            fh.write(text)
    assert log.read_bytes() == b"one\ntwo\n"
    (tmp_path / "link.txt").symlink_to(log)
    with pytest.raises(ResourceError):
        files.open_log_file(tmp_path / "link.txt")
    with files.create_exclusive(tmp_path / "new.bin") as fh:
        fh.write(b"x")
    with pytest.raises(FileExistsError):
        files.create_exclusive(tmp_path / "new.bin")


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

"""tools/campaigns/files.py: a campaign's copies and removals are made all together or undone, and
its logs and unpacked members are never opened through a link."""

import os
from pathlib import Path

import pytest

from swarmctl.errors import ResourceError
from swarmctl.files import atomic_write_text, staged_outputs
from tools.campaigns.files import all_or_none, copy_file, create_exclusive, open_log_file, remove_file


def test_a_group_replaces_removes_and_writes_files_all_at_once_or_puts_them_back(tmp_path, monkeypatch):
    """A group that replaces one file, removes another and writes a third: on success all three changes are
    made; when publishing fails part-way, the replaced file and the removed one are back as they were and the
    new one and its folder are gone (the campaign commit depends on it)."""
    old, gone, new = tmp_path / "old.txt", tmp_path / "gone.txt", tmp_path / "sub" / "new.txt"

    def group():
        with all_or_none([old, gone, new]), staged_outputs():
            atomic_write_text(old, "replaced\n")
            remove_file(gone)
            copy_file(old.with_name("source.txt"), new)
            assert old.read_text() == "before\n" and not new.exists()  # written when the block ends

    (tmp_path / "source.txt").write_text("copied\n")
    old.write_text("before\n")
    gone.write_text("still here\n")
    real = os.replace

    def full_disk(tmp, path):
        if Path(path).name == "new.txt":
            raise OSError(28, "No space left on device", str(path))
        real(tmp, path)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        group()
    assert old.read_text() == "before\n" and gone.read_text() == "still here\n" and not new.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone.txt", "old.txt", "source.txt"]  # no temporary file

    monkeypatch.undo()
    group()
    assert old.read_text() == "replaced\n" and not gone.exists() and new.read_text() == "copied\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt", "source.txt", "sub"]


def test_remove_file_outside_a_group_removes_at_once_and_refuses_a_link(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("x")
    remove_file(target)
    remove_file(target)  # missing: no error
    assert not target.exists()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ResourceError, match="link"):
        remove_file(tmp_path / "link")


def test_a_log_file_is_appended_and_never_opened_through_a_link(tmp_path):
    log = tmp_path / "log.txt"
    for text in (b"one\n", b"two\n"):
        with open_log_file(log) as fh:
            fh.write(text)
    assert log.read_bytes() == b"one\ntwo\n"
    (tmp_path / "link.txt").symlink_to(log)
    with pytest.raises(ResourceError):
        open_log_file(tmp_path / "link.txt")
    with create_exclusive(tmp_path / "new.bin") as fh:
        fh.write(b"x")
    with pytest.raises(FileExistsError):
        create_exclusive(tmp_path / "new.bin")

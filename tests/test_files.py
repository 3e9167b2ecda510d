"""files.staged_outputs: a command's outputs are checked when named, before any work, and written all or none."""

import pytest

from swarmctl.errors import ConfigError, OutputExists, ResourceError
from swarmctl.files import atomic_write_text, check_png, staged_outputs


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

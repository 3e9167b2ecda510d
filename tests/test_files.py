"""files.staged_outputs: a command's outputs are checked when named, before any work, and written all or none."""

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

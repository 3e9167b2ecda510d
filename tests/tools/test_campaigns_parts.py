"""A file in parts under a size limit: split, join, and every way the parts can come back wrong."""

import hashlib
import json
import os

import pytest

from swarmctl.errors import DataError
from tools.campaigns import parts


@pytest.fixture
def big(tmp_path):
    path = tmp_path / "src" / "mog-last.pt"
    path.parent.mkdir()
    path.write_bytes(os.urandom(10_000) + b"tail")
    return path


def test_parts_round_trip_under_the_limit(big, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    manifest = parts.split(big, out, limit=3_000)
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([*(f"mog-last.pt.part{k}" for k in range(4)), "mog-last.pt.parts.json"])
    assert all((out / f).stat().st_size <= 3_000 for f in files if ".part" in f and not f.endswith(".json"))
    assert manifest.size == 10_004 and len(manifest.parts) == 4
    dest = tmp_path / "joined.pt"
    parts.join(parts.manifest_path(out, "mog-last.pt"), dest)
    assert dest.read_bytes() == big.read_bytes()


def test_parts_of_a_file_under_the_limit_is_one_part(big, tmp_path):
    manifest = parts.split(big, tmp_path, limit=1 << 20)
    assert [f for f, _, _ in manifest.parts] == ["mog-last.pt.part0"]


def test_parts_of_an_empty_file_round_trip(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "o").mkdir()
    parts.split(tmp_path / "empty.pt", tmp_path / "o", limit=10)
    parts.join(parts.manifest_path(tmp_path / "o", "empty.pt"), tmp_path / "back.pt")
    assert (tmp_path / "back.pt").read_bytes() == b""


@pytest.fixture
def split_out(big, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    parts.split(big, out, limit=3_000)
    return out, parts.manifest_path(out, "mog-last.pt")


def _join_fails(manifest, tmp_path, match):
    dest = tmp_path / "joined.pt"
    with pytest.raises(DataError, match=match):
        parts.join(manifest, dest)
    assert not dest.exists()


def test_parts_a_missing_part_is_named(split_out, tmp_path):
    out, manifest = split_out
    (out / "mog-last.pt.part2").unlink()
    _join_fails(manifest, tmp_path, "part2 is missing")


def test_parts_a_changed_part_is_refused(split_out, tmp_path):
    out, manifest = split_out
    part = out / "mog-last.pt.part1"
    data = bytearray(part.read_bytes())
    data[5] ^= 1
    part.write_bytes(bytes(data))
    _join_fails(manifest, tmp_path, "part1 is not the part its manifest describes")


def test_parts_a_truncated_part_is_refused(split_out, tmp_path):
    out, manifest = split_out
    part = out / "mog-last.pt.part3"
    part.write_bytes(part.read_bytes()[:-1])
    _join_fails(manifest, tmp_path, "part3 is not the part")


def test_parts_swapped_parts_are_refused(split_out, tmp_path):
    out, manifest = split_out
    a, b = out / "mog-last.pt.part0", out / "mog-last.pt.part1"
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    _join_fails(manifest, tmp_path, "part0 is not the part")


def test_parts_a_consistent_but_forged_manifest_is_refused(split_out, tmp_path):
    """Parts and their entries replaced together still fail the whole file's digest."""
    out, manifest = split_out
    part = out / "mog-last.pt.part1"
    forged = b"x" * part.stat().st_size
    part.write_bytes(forged)
    doc = json.loads(manifest.read_text())
    doc["parts"][1]["sha256"] = hashlib.sha256(forged).hexdigest()
    manifest.write_text(json.dumps(doc))
    _join_fails(manifest, tmp_path, "do not join into the file")


@pytest.mark.parametrize("change", [
    lambda d: d["parts"].append({"file": "../evil", "size": 0, "sha256": "0" * 64}),
    lambda d: d["parts"][0].update(file="/etc/passwd"),
    lambda d: d.update(size=d["size"] + 1),
    lambda d: d.update(size=True),
    lambda d: d.update(sha256="xyz"),
    lambda d: d.update(parts=[]),
    lambda d: d.update(name="other.pt"),
    lambda d: d.pop("parts"),
    lambda d: d.update(extra=1),
])
def test_parts_a_malformed_manifest_is_refused(split_out, tmp_path, change):
    out, manifest = split_out
    doc = json.loads(manifest.read_text())
    change(doc)
    manifest.write_text(json.dumps(doc))
    _join_fails(manifest, tmp_path, "manifest|describes")


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b"\xff\xfe", b'"text"'])
def test_parts_an_unreadable_manifest_is_refused(split_out, tmp_path, content):
    _, manifest = split_out
    manifest.write_bytes(content)
    _join_fails(manifest, tmp_path, "manifest|JSON")


def test_parts_a_missing_manifest_is_named(tmp_path):
    _join_fails(tmp_path / "mog-last.pt.parts.json", tmp_path, "without their manifest")


def test_parts_refuse_an_odd_file_name(tmp_path):
    odd = tmp_path / "a b.pt"
    odd.write_bytes(b"x")
    with pytest.raises(DataError, match="plain file name"):
        parts.split(odd, tmp_path, 1 << 20)


def test_parts_too_many_parts_are_refused_before_anything_is_written(big, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError, match="more than"):
        parts.split(big, out, limit=100)
    assert list(out.iterdir()) == []

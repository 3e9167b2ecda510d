"""`swarmctl campaign run` and `status` on broken inputs: an OUT that names a file, a damaged progress.json,
a bad option value. Each ends in one line (exit 1, 2 for a value wrong in itself), not a traceback, and the
job writes nothing."""

from __future__ import annotations

import pytest
from conftest import fresh_campaigns


def _one_line(result, code, *words):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(w in result.stderr for w in words), result.stderr


def test_run_into_an_out_that_is_a_file_is_one_line(cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    out = tmp_path / "out"
    out.write_text("a file\n")
    r = cli("campaign", "run", out, "--campaigns", root, "--work", tmp_path / "work")
    _one_line(r, 1, str(out), "is a file")
    assert out.read_text() == "a file\n" and not (tmp_path / "work").exists()


@pytest.mark.parametrize("command", ["run", "status"])
def test_a_damaged_progress_file_is_one_line(cli, tmp_path, command):
    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "mog" / "progress.json").write_text('{"campaign": "mog", "sessions": [')
    args = [tmp_path / "out", "--work", tmp_path / "work"] if command == "run" else []
    r = cli("campaign", command, *args, "--campaigns", root)
    _one_line(r, 1, "progress.json is damaged", "git checkout")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("option", [("--only", "cifar"), ("--probe", "everything"), ("--wall", "0")])
def test_a_bad_value_exits_2_before_the_job_starts(cli, tmp_path, option):
    root = fresh_campaigns(tmp_path / "campaigns")
    r = cli("campaign", "run", tmp_path / "out", "--campaigns", root, "--work", tmp_path / "work", *option)
    _one_line(r, 2, option[0])
    assert not (tmp_path / "out").exists()


def test_commit_of_a_subset_under_two_exits_2(cli, tmp_path):
    r = cli("campaign", "commit", tmp_path, "--subset", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output

"""`python -m tools.campaigns run` and `status` on broken inputs: an OUT that names a file, a damaged progress.json,
a bad option value. Each ends in one line (exit 1, 2 for a value wrong in itself), not a traceback, and the
job writes nothing."""

from __future__ import annotations

import pytest
from conftest import fresh_campaigns


def _one_line(result, code, *words):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(w in result.stderr for w in words), result.stderr


def test_run_into_an_out_that_is_a_file_is_one_line(campaigns_cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    out = tmp_path / "out"
    out.write_text("a file\n")
    r = campaigns_cli("run", out, "--campaigns", root, "--work", tmp_path / "work")
    _one_line(r, 1, str(out), "is a file")
    assert out.read_text() == "a file\n" and not (tmp_path / "work").exists()


@pytest.mark.parametrize("command", ["run", "status"])
def test_a_damaged_progress_file_is_one_line(campaigns_cli, tmp_path, command):
    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "mog" / "progress.json").write_text('{"campaign": "mog", "sessions": [')
    args = [tmp_path / "out", "--work", tmp_path / "work"] if command == "run" else []
    r = campaigns_cli(command, *args, "--campaigns", root)
    _one_line(r, 1, "progress.json is damaged", "git checkout")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize("option", [("--only", "cifar"), ("--probe", "everything"), ("--wall", "0"), ("--files", "2"),
                                    ("--file-mib", "0")])
def test_a_bad_value_exits_2_before_the_job_starts(campaigns_cli, tmp_path, option):
    root = fresh_campaigns(tmp_path / "campaigns")
    r = campaigns_cli("run", tmp_path / "out", "--campaigns", root, "--work", tmp_path / "work", *option)
    _one_line(r, 2, option[0])
    assert not (tmp_path / "out").exists()


def test_commit_of_a_subset_under_two_exits_2(campaigns_cli, tmp_path):
    r = campaigns_cli("commit", tmp_path, "--subset", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("where", ["cwd", "parent", "campaigns", "out"])
def test_run_never_empties_a_work_folder_that_holds_the_users_files(campaigns_cli, tmp_path, monkeypatch, where):
    """The job empties its work folder: `--work .` (or a folder above the campaigns, OUT or the current folder)
    deleted the repository before; now it is refused before anything is touched."""
    root = fresh_campaigns(tmp_path / "repo" / "campaigns")
    (tmp_path / "repo" / "precious.txt").write_text("mine\n")
    monkeypatch.chdir(tmp_path / "repo")
    work = {"cwd": ".", "parent": "..", "campaigns": "campaigns", "out": "out"}[where]
    r = campaigns_cli("run", "out/job", "--campaigns", root, "--work", work)
    _one_line(r, 2, "--work", "empties its work folder")
    assert (tmp_path / "repo" / "precious.txt").read_text() == "mine\n"
    assert (root / "mog" / "progress.json").is_file() and not (tmp_path / "repo" / "out").exists()


def test_run_never_empties_a_folder_of_files_no_job_made(campaigns_cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    work = tmp_path / "scratch"
    work.mkdir()
    (work / "notes.txt").write_text("mine\n")
    r = campaigns_cli("run", tmp_path / "out", "--campaigns", root, "--work", work)
    _one_line(r, 1, str(work), "no job made")
    assert (work / "notes.txt").read_text() == "mine\n"


def test_status_of_a_missing_campaigns_folder_is_one_line(campaigns_cli, tmp_path):
    _one_line(campaigns_cli("status", "--campaigns", tmp_path / "nowhere"), 1, "is not a folder")


def test_run_with_a_data_folder_under_a_file_is_one_line(campaigns_cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    (tmp_path / "a-file").write_text("x\n")
    r = campaigns_cli("run", tmp_path / "out", "--campaigns", root, "--work", tmp_path / "work",
            "--data-dir", tmp_path / "a-file" / "data")
    _one_line(r, 1, "lies under one", "--data-dir")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_commit_into_a_shipped_models_folder_that_is_a_file_is_one_line(campaigns_cli, tmp_path):
    (tmp_path / "a-file").write_text("x\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "session.json").write_text('{"card": "NVIDIA H200"}')
    r = campaigns_cli("commit", tmp_path / "out", "--campaigns", fresh_campaigns(tmp_path / "campaigns"),
            "--pretrained", tmp_path / "a-file")
    _one_line(r, 1, "is not a folder", "--pretrained")

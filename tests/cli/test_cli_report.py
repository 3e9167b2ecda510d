"""`swarmctl report` as a user reads it: every column whole in a pipe, the data each row trained on, the
runs with no finished epoch, the paper's number beside a row it covers, and the table as JSON and CSV."""

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.rundir import RunDir


def fake_run(runs, name, model="swarm", code="8-3-1", seed=0, losses=(0.9, 0.8), data="/data/train.h5",
             parameters=1234, dataset=None, checkpoint=False):
    """A run folder as the trainer leaves it: its config and one metrics line per finished epoch."""
    run = RunDir(runs / name)
    run.path.mkdir(parents=True)
    cfg = {"model": {"name": model}, "train": {"seed": seed}, "data": {"path": data, "dataset": dataset},
           "run": {"code": code, "parameters": parameters, "device": "cpu"}}
    run.config.write_text(json.dumps(cfg))
    best = float("inf")
    lines = []
    for epoch, loss in enumerate(losses):
        best = min(best, loss)
        lines.append(json.dumps({"epoch": epoch, "train_loss": loss, "val_loss": loss, "best_val": best, "lr": 1e-3,
                                 "net_seconds": 60.0 * (epoch + 1), "backtracked": False}))
    run.metrics.write_text("".join(line + "\n" for line in lines))
    if checkpoint:
        run.last.write_bytes(b"")
    return run


def piped(*args):
    """The command's output as a pipe or a file gets it: not a terminal, no width to fit."""
    return CliRunner().invoke(app, [str(a) for a in args])


LONG = "a-run-with-a-rather-long-name-that-no-eighty-column-terminal-holds-whole"


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    for seed, loss in [(0, 0.41), (1, 0.42), (2, 0.415)]:
        fake_run(runs, f"paper-s{seed}", code="192-10-1", seed=seed, losses=(0.9, loss), parameters=301066)
    fake_run(runs, "small-s0", code="8-3-1", losses=(0.9, 0.7))
    fake_run(runs, "small-other-data-s0", code="8-3-1", losses=(0.6,), data="/elsewhere/other-data.h5")
    fake_run(runs, LONG, model="set-transformer-with-a-long-family-name", code="64-100-10-1000",
             losses=(0.95,), parameters=123_456_789, data="/" + "d" * 90 + "/train-with-a-long-file-name.h5")
    fake_run(runs, "stopped-s0", code="16-3-1", losses=(), checkpoint=True)
    fake_run(runs, "literal-s0", model="lstm", code="8-1", losses=(0.99,), data="/data/[bold]x:smile:.h5")
    return runs


def test_a_piped_report_shows_every_column_whole(runs, tmp_path):
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    lines = r.output.splitlines()
    header = next(line for line in lines if "best val loss" in line)
    for column in ("model", "code", "data", "parameters", "n", "seed ids", "best val loss", "paper", "epochs",
                   "net min", "device"):
        assert column in header
    long_row = next(line for line in lines if "set-transformer-with-a-long-family-name" in line)
    assert "64-100-10-1000" in long_row and "train-with-a-long-file-name.h5" in long_row
    assert "123,456,789" in long_row and "0.9500" in long_row
    assert str(tmp_path / "rep" / "report.md") in r.output  # a path on one line
    assert "[bold]x:smile:.h5" in r.output  # a file name as written


def test_report_names_each_rows_data_and_never_pools_two_datasets(runs, tmp_path):
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    small = sorted((row["data"], row["n"], row["val_loss_mean"]) for row in rows
                   if row["code"] == "8-3-1" and row["status"] == "finished")
    assert small == [("other-data.h5", 1, 0.6), ("train.h5", 1, 0.7)]


def test_report_lists_a_run_with_no_finished_epoch(runs, tmp_path):
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "16-3-1" in line)
    assert "unfinished" in row
    assert "stopped-s0 (no finished epoch" in r.output
    assert "stopped-s0 (no finished epoch" in (tmp_path / "rep" / "report.md").read_text()
    rows = json.loads(piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--json", "--force").stdout)
    (stopped,) = [row for row in rows if row["status"] == "unfinished"]
    assert stopped["code"] == "16-3-1" and stopped["val_loss_mean"] is None and "stopped-s0" in stopped["note"]


def test_report_shows_the_papers_number_beside_a_row_it_covers(runs, tmp_path):
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep")
    row = next(line for line in r.output.splitlines() if "192-10-1" in line)
    assert "0.4150 ± 0.0050" in row and "0.416 ± 0.004" in row  # three seeds: mean ± std, then the paper's
    small = next(line for line in r.stdout.splitlines() if "8-3-1" in line and "train.h5" in line)
    assert "0.7000" in small and "±" not in small  # one seed: no spread, and the paper has no such model


def test_report_as_csv_has_one_line_per_row(runs, tmp_path):
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 6 and {row["status"] for row in rows} == {"finished", "unfinished"}
    paper = next(row for row in rows if row["code"] == "192-10-1")
    assert (paper["n"], paper["seeds"], paper["paper"]) == ("3", "0 1 2", "0.416")
    assert piped("report", "--runs-dir", runs, "--json", "--csv").exit_code == 2

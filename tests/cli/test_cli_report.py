"""`swarmctl report` as a user reads it: every column whole in a pipe, every value whole in a terminal of 80,
120 or 200 columns, the data each row trained on, the runs with no finished epoch, the paper's number beside
a row on the paper's data, each row's hardware, and the table as JSON and CSV."""

import csv
import fcntl
import io
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import warnings
from pathlib import Path

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.errors import SwarmctlWarning
from swarmctl.rundir import RunDir
from swarmctl.studies.report import REPORT_COLUMNS, report

# the table is what these tests read: the frontier figure beside it is saved undrawn in this process (drawn for real
# by test_a_real_80_column_terminal_gets_one_block_per_row's process and tests/studies/test_studies.py)
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def fake_run(runs, name, model="swarm", code="8-3-1", seed=0, losses=(0.9, 0.8), data="/data/train.h5",
             parameters=1234, dataset=None, checkpoint=False, hardware=None):
    """A run folder as the trainer leaves it: its config and one metrics line per finished epoch (``hardware``
    None: a run from before the trainer recorded it)."""
    run = RunDir(runs / name)
    run.path.mkdir(parents=True)
    cfg = {"model": {"name": model}, "train": {"seed": seed}, "data": {"path": data, "dataset": dataset},
           "run": {"code": code, "parameters": parameters, "device": "cpu",
                   **({} if hardware is None else {"hardware": hardware})}}
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


def piped_at(columns, *args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def on_a_terminal(columns, *args):
    """The command's output in a terminal ``columns`` wide (rich reads COLUMNS and the terminal flag)."""
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns), "TTY_COMPATIBLE": "1"})


LONG = "a-run-with-a-rather-long-name-that-no-eighty-column-terminal-holds-whole"


def paper_runs(runs):
    """Runs as a campaign leaves them: three seeds on the paper's data on a CPU, one on a card, one on a
    reduced set."""
    for seed, loss in [(0, 0.41), (1, 0.42), (2, 0.415)]:
        fake_run(runs, f"paper-s{seed}", code="192-10-1", seed=seed, losses=(0.9, loss), parameters=301066,
                 data="data/clustering-seed0.h5", hardware=["cpu, 1 thread"])
    fake_run(runs, "set-linear-64-6-s0", model="set-linear", code="64-6", losses=(0.7, 0.65), parameters=34964,
             data="data/clustering-seed0.h5", hardware=["NVIDIA H200"])
    fake_run(runs, "demo-s0", code="192-10-1", losses=(0.9, 0.5), parameters=301066, data="data/demo-seed0.h5",
             hardware=["cpu, 2 threads"])
    return runs


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    for seed, loss in [(0, 0.41), (1, 0.42), (2, 0.415)]:
        fake_run(runs, f"paper-s{seed}", code="192-10-1", seed=seed, losses=(0.9, loss), parameters=301066,
                 data="/data/clustering-seed0.h5")
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
                   "net min", "hardware"):
        assert column in header
    assert "not shown" not in r.output  # a pipe leaves out no column, whatever the width
    assert piped_at(80, "report", "--runs-dir", runs, "--out", tmp_path / "rep", "--force").output == r.output
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


def test_report_names_each_rows_hardware_and_the_papers_number_only_on_the_papers_data(tmp_path):
    runs = paper_runs(tmp_path / "runs")
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    rows = {line.split()[2]: line for line in r.output.splitlines() if "192-10-1" in line}
    assert "0.416 ± 0.004" in rows["clustering-seed0.h5"] and "cpu, 1 thread" in rows["clustering-seed0.h5"]
    assert "0.416" not in rows["demo-seed0.h5"] and "cpu, 2 threads" in rows["demo-seed0.h5"]
    records = json.loads(piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--force", "--json").stdout)
    old = {"model", "code", "data", "parameters", "n", "seeds", "val_loss_mean", "val_loss_std", "paper", "paper_std",
           "epochs", "net_minutes", "devices", "status", "note"}  # the fields before hardware: all still there
    assert all(old <= set(rec) for rec in records)
    mine = {(rec["model"], rec["data"]): rec for rec in records}
    card = mine["set-linear", "clustering-seed0.h5"]
    assert (card["hardware"], card["papers_data"], card["paper"], card["epochs"], card["net_minutes"]) == (
        "NVIDIA H200", True, 0.642, 2, 2.0)
    assert (mine["swarm", "demo-seed0.h5"]["paper"], mine["swarm", "demo-seed0.h5"]["papers_data"]) == (None, False)
    header = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--force", "--csv").stdout.splitlines()[0]
    assert set(header.split(",")) == old | {"hardware", "papers_data"}


def table_of(runs, out):
    """The report's rows as text, as the study makes them (its warning about two datasets aside)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SwarmctlWarning)
        with report(runs, out) as rep:
            return rep.table


def _assert_every_value_whole(output, rows, columns):
    """No line of the table wider than the terminal, nothing cut to "…", and every value of every row whole:
    in a table, a row's values in order on one line (less the columns a line says are not shown); in blocks,
    each "column: value" pair in its row's block. Returns which of the two it printed."""
    lines = output.splitlines()
    table = [line for line in lines if not line.startswith("runs in ")]  # the title: a path, whole on its line
    assert "…" not in output and max(cell_len(line) for line in table) <= columns, output
    gone = re.search(rf"not shown at {columns} columns: (.*?) \(", output)
    left_out = gone.group(1).split(", ") if gone else []
    if any(line.startswith("model: ") for line in lines):
        blocks = [b for b in output.split("\n\n") if b.startswith("model: ")]
        assert len(blocks) == len(rows) and not left_out, output
        for block, row in zip(blocks, rows, strict=True):
            for col, cell in zip(REPORT_COLUMNS, row, strict=True):
                assert not cell or f"{col}: {cell}" in block, (col, cell, block)
        return "blocks"
    for row in rows:
        shown = [c for col, c in zip(REPORT_COLUMNS, row, strict=True) if c and col not in left_out]
        pattern = r"\s+".join(map(re.escape, shown))
        assert any(re.search(pattern, line) for line in lines), (row, output)
    return "table" + (f" without {', '.join(left_out)}" if left_out else "")


# every layout once in the default suite; the odd runs at 120 columns (blocks, as at 80) slow
@pytest.mark.parametrize(("columns", "which", "shown"), [
    (80, "paper", "blocks"), (120, "paper", "table without seed ids, parameters"), (200, "paper", "table"),
    (80, "odd", "blocks"), pytest.param(120, "odd", "blocks", marks=pytest.mark.slow), (200, "odd", "table")])
def test_a_terminal_of_80_120_or_200_columns_shows_every_value_whole(runs, tmp_path, columns, which, shown):
    """Narrower than the table, the headers wrap, then the optional columns go (a line names them), then each
    row becomes a block: never a value cut. "odd": long names, an unfinished run, a file name with markup."""
    folder = paper_runs(tmp_path / "paper") if which == "paper" else runs
    rows = table_of(folder, tmp_path / "rows")
    r = on_a_terminal(columns, "report", "--runs-dir", folder, "--out", tmp_path / "rep")
    assert r.exit_code == 0, r.output
    assert _assert_every_value_whole(r.stdout, rows, columns) == shown  # a warning on stderr is a line of its own


def test_a_real_80_column_terminal_gets_one_block_per_row(tmp_path):
    """A process on a pseudo-terminal 80 columns wide, as a user's shell runs it (no COLUMNS set)."""
    runs = paper_runs(tmp_path / "runs")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TTY_COMPATIBLE")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "swarmctl", "report", "--runs-dir", str(runs), "--out",
                             str(tmp_path / "rep")], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=subprocess.DEVNULL, env=env)  # its warning about two datasets aside
    os.close(slave)
    shown = b""
    while select.select([master], [], [], 120)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, shown
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown.decode()).replace("\r\n", "\n")
    assert _assert_every_value_whole(text, table_of(runs, tmp_path / "rows"), 80) == "blocks"


def test_report_leaves_a_run_stopped_before_its_budget_out_of_the_means(tmp_path):
    """A seed still training (or interrupted before its net budget and epoch limit) is no seed yet: the row's
    mean is over the runs that spent their budget, and the stopped one is named with how far it got."""
    runs = tmp_path / "runs"
    for seed, losses in ((0, (0.9, 0.5)), (1, (0.9, 0.7)), (2, (0.9,))):
        run = fake_run(runs, f"swarm-8-3-1-s{seed}", seed=seed, losses=losses)
        cfg = json.loads(run.config.read_text())
        cfg["train"].update(minutes=2.0, max_epochs=1000)  # 60 net seconds an epoch: two epochs spend it
        run.config.write_text(json.dumps(cfg))
    rows = json.loads(piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--json").stdout)
    (done,) = [row for row in rows if row["status"] == "finished"]
    assert done["n"] == 2 and done["val_loss_mean"] == pytest.approx(0.6)
    (stopped,) = [row for row in rows if row["status"] == "unfinished"]
    assert "swarm-8-3-1-s2" in stopped["note"] and "1 epoch, 1.0 of 2 net min" in stopped["note"]
    assert stopped["epochs"] is None and stopped["net_minutes"] is None  # as its loss: no seed yet, no number
    row = next(line for line in piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--force").stdout
               .splitlines() if "unfinished" in line and "8-3-1" in line)
    assert row.split()[-3:] == ["2", "unfinished", "cpu"]  # no epochs nor minutes beside it, as no loss


def test_a_folder_of_runs_stopped_before_their_budget_says_to_resume_them(tmp_path):
    """Runs with finished epochs but none of them finished: the one-line error says so and gives the command that
    resumes one, not 'no runs with a finished epoch' and 'train a model' (one has an epoch; training anew loses it)."""
    runs = tmp_path / "runs"
    run = fake_run(runs, "swarm-8-3-1-s0", losses=(0.9,))
    cfg = json.loads(run.config.read_text())
    cfg["train"].update(minutes=2.0, max_epochs=1000)
    run.config.write_text(json.dumps(cfg))
    fake_run(runs, "swarm-8-3-1-s1", losses=(), checkpoint=True)
    r = piped("report", "--runs-dir", runs, "--out", tmp_path / "rep", "--csv")
    assert r.exit_code == 1 and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "holds no finished run (unfinished: swarm-8-3-1-s0, swarm-8-3-1-s1)" in r.output
    assert "resume one to its budget: swarmctl train swarm --resume swarm-8-3-1-s0 --runs-dir" in r.output

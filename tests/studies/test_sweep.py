"""`swarmctl sweep`: spec expansion, the shard split, idempotence, resume, dry-run, and the report of a sweep."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.errors import ConfigError
from swarmctl.studies.sweep import expand, load_spec, parse_shard, parse_spec, shard, train_sweep

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
# what a sweep trains, skips and reports is what these tests read: its runs' curves and the report's frontier are
# saved undrawn (a sweep's curves are drawn for real in tests/robustness/test_signal_edges.py, where a signal stops
# the drawing and a re-run draws what is missing)
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def tiny_spec(tmp_path, data, name="t", seeds="[0, 1]", max_epochs=1, extra=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\nseeds = {seeds}\nminutes = 5\nmax_epochs = {max_epochs}\nbatch_size = 6\n'
                    f'data = "{data}"\ndevice = "cpu"\n{extra}'
                    '[[grid]]\nmodel = "set-linear"\nhidden = [4, 8]\nlayers = 2\n'
                    '[[grid]]\nmodel = "swarm"\nhidden = 4\niters = 2\nlayers = 1\n')
    return path


def run_files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def paper_spec():
    """The paper's spec, read once for the module (reading it builds its 214 models: a second or more)."""
    return load_spec(REPO / "sweeps" / "paper.toml")


@pytest.fixture(scope="module")
def paper_runs(paper_spec):
    return expand(paper_spec)


def test_paper_spec_is_the_papers_grid_plus_the_two_setlinear_extras(paper_spec):
    spec = paper_spec
    per_family = {}
    for cfg in spec.configs:
        per_family[cfg.name] = per_family.get(cfg.name, 0) + 1
    assert per_family == {"swarm": 56, "set-transformer": 120, "lstm": 12, "lstm-sorted": 12, "set-linear": 7,
                          "set-linear-max": 7}
    runs = expand(spec)
    assert len(runs) == 214 * 3 and len({r.name for r in runs}) == len(runs)
    names = {r.name for r in runs}
    assert {"set-linear-64-6-s2", "set-linear-max-96-6-s0", "swarm-192-10-1-s1", "set-transformer-32-60-3-s0"} <= names
    best = expand(load_spec(REPO / "sweeps" / "best.toml"))
    assert sorted(r.name for r in best if r.seed == 0) == sorted(
        ["swarm-192-10-1-s0", "set-transformer-32-60-3-s0", "lstm-128-3-s0", "lstm-sorted-64-3-s0",
         "set-linear-64-6-s0", "set-linear-max-96-6-s0"])
    assert {r.name for r in best} <= names




@pytest.mark.parametrize("count", [1, 2, 3, 7, 8, 642, 700])
def test_shards_are_disjoint_complete_and_balanced(count, paper_runs):
    runs = paper_runs
    shares = [shard(runs, i, count) for i in range(count)]
    names = [r.name for share in shares for r in share]
    assert len(names) == len(set(names))  # disjoint
    assert set(names) == {r.name for r in runs}  # complete
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_shards_are_stable_across_processes(paper_runs):
    """A re-run on another machine gets the same share: two processes with different hash seeds (set and
    dict order, were it used, would differ) give every shard of the paper grid the same runs."""
    code = ("import sys; from swarmctl.studies.sweep import expand, load_spec, shard; "
            "runs = expand(load_spec(sys.argv[1])); "
            "print('|'.join(','.join(r.name for r in shard(runs, i, 7)) for i in range(7)))")
    outputs = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code, str(REPO / "sweeps" / "paper.toml")], env=env,
                             capture_output=True, text=True, check=True)
        outputs.add(out.stdout)
    assert len(outputs) == 1
    shares = outputs.pop().strip().split("|")
    assert shares == [",".join(r.name for r in shard(paper_runs, i, 7)) for i in range(7)]


def test_shard_membership_is_fixed_by_the_spec():
    spec = parse_spec('seeds = [0, 1]\nminutes = 1\n[[grid]]\nmodel = "set-linear"\n'
                      'hidden = [32, 64]\nlayers = [2, 4]\n', "s")
    assert [r.name for r in shard(expand(spec), 1, 3)] == ["set-linear-32-4-s0", "set-linear-32-2-s1",
                                                            "set-linear-64-4-s1"]


@pytest.mark.parametrize(("text", "problem"), [
    ("0/0", "0 <= I < N"), ("3/3", "0 <= I < N"), ("-1/2", "0 <= I < N"), ("1", "I/N"), ("a/b", "I/N")])
def test_bad_shards(text, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_shard(text)


@pytest.mark.parametrize(("body", "problem"), [
    ('minutes = 1\n[[grid]]\nmodel = "lstm"\niters = 5\n', "lstm has no iters"),
    ('minutes = 1\n[[grid]]\nmodel = "nope"\n', "not registered"),
    ('minutes = 1\n', "no \\[\\[grid\\]\\]"),
    ('minutes = 0\n[[grid]]\nmodel = "lstm"\n', "minutes"),
    ('minutes = 1\nseeds = [0, 0]\n[[grid]]\nmodel = "lstm"\n', "seeds"),
    ('minutes = 1\nepochs = 3\n[[grid]]\nmodel = "lstm"\n', "unknown key"),
    ('minutes = 1\n[[grid]]\nmodel = "lstm"\nhidden = []\n', "empty list"),
    ('minutes = 1\n[[grid]]\nmodel = "swarm"\n[[grid]]\nmodel = "swarm-mog"\n', "one task per spec"),
    ('minutes = [1\n', "not valid TOML"),
    ('minutes = 1\n[[grid]]\nmodel = "swarm"\nstep = ["eager", "amp"]\n', "step is set for the whole spec"),
    ('minutes = 1\n[[grid]]\nmodel = "lstm"\nminutes = 2\n', "move `minutes = ...` above"),
])
def test_bad_specs_name_the_problem(tmp_path, body, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_spec(body, "x")
    path = tmp_path / "bad.toml"
    path.write_text(body)
    r = cli("sweep", path, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "Traceback" not in r.output and not (tmp_path / "runs").exists()


def test_dry_run_lists_configurations_and_budget_and_writes_nothing(tmp_path):
    r = cli("sweep", REPO / "sweeps" / "paper.toml", "--dry-run", "--runs-dir", tmp_path / "runs", "--shard", "2/8")
    assert r.exit_code == 0, r.output
    assert "301,066" in r.output and " 192-10-1 " in r.output  # parameter counts
    assert "214 configurations x 3 seeds (0,1,2) = 642 runs" in r.output and "642.0 h" in r.output
    assert "shard 2/8: 80 runs" in r.output
    assert not (tmp_path / "runs").exists()


def test_dry_run_is_one_table_with_a_legend_and_its_summary_once(tmp_path, paper_spec):
    """A pipe gets the table whole (no "…"), its columns explained, the budget said once; a shard lists the
    configurations it trains."""
    r = runner.invoke(app, ["sweep", str(REPO / "sweeps" / "paper.toml"), "--dry-run", "--runs-dir",
                            str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    header = next(k for k, line in enumerate(lines) if line.split()[:1] == ["model"])
    assert lines[header].split() == ["model", "code", "parameters", "runs", "here", "done", "partial"]
    rows = [line.split() for line in lines[header + 2 :] if line.strip()][:214]
    assert rows[0][:3] == ["swarm", "16-2-1", f"{paper_spec.parameters[0]:,}"]
    assert all(row[3:] == ["3", "0", "0"] for row in rows)
    assert "…" not in r.output and max(len(line) for line in lines[header : header + 216]) <= 80
    assert sum("642 runs" in line for line in lines) == 1  # the summary once
    assert any(line.startswith("runs here: this shard's runs") for line in lines)
    sharded = cli("sweep", REPO / "sweeps" / "best.toml", "--dry-run", "--runs-dir", tmp_path / "runs", "--shard",
                  "1/4", "--csv")
    table = list(csv.DictReader(io.StringIO(sharded.stdout)))
    assert sum(int(row["runs_here"]) for row in table) in (4, 5) and all(int(row["runs_here"]) for row in table)
    listed = json.loads(cli("sweep", REPO / "sweeps" / "best.toml", "--dry-run", "--runs-dir", tmp_path / "runs",
                            "--json").stdout)
    assert listed[0] == {"model": "swarm", "code": "192-10-1", "parameters": 301066, "seeds": [0, 1, 2],
                         "runs_here": 3, "done": 0, "partial": 0}
    assert cli("sweep", REPO / "sweeps" / "best.toml", "--json").exit_code == 2  # a table only with --dry-run
    assert not (tmp_path / "runs").exists()


def mog_spec(tmp_path):
    spec = tmp_path / "mog.toml"
    spec.write_text('seeds = [0]\nminutes = 0.002\nmax_epochs = 1\nbatch_size = 2\ndevice = "cpu"\n'
                    '[[grid]]\nmodel = "swarm-mog"\nhidden = 4\niters = 1\n')
    return spec


def test_a_mog_sweep_dry_run_lists_its_runs(tmp_path):
    r = cli("sweep", mog_spec(tmp_path), "--runs-dir", tmp_path / "runs", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "swarm-mog" in r.output and "1 configurations x 1 seeds (0) = 1 runs" in r.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_mog_sweep_runs_from_a_spec(tmp_path):
    spec, runs = mog_spec(tmp_path), tmp_path / "runs"
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    run = runs / "sweep-mog" / "swarm-mog-4-1-1-s0"
    assert (run / "best.pt").is_file() and (run / "curves.png").is_file()
    assert json.loads((run / "config.json").read_text())["data"]["path"] is None  # tasks drawn fresh
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 0 and "0 run(s) trained, 1 already finished" in r.output, r.output


def test_sweep_is_idempotent_shards_cover_the_grid_and_report_reads_it(tmp_path, tiny_h5, monkeypatch):
    spec = tiny_spec(tmp_path, tiny_h5)
    runs = tmp_path / "runs"
    for i in range(2):
        r = cli("sweep", spec, "--runs-dir", runs, "--shard", f"{i}/2")
        assert r.exit_code == 0, r.output
        assert r.output.count(" step (") == 3, r.output  # each run says its device and step mode, as train does
    folder = runs / "sweep-t"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{m}-s{s}" for s in (0, 1) for m in ("set-linear-4-2", "set-linear-8-2", "swarm-4-2-1"))
    before = run_files(folder)
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert "0 run(s) trained, 6 already finished" in r.output
    assert run_files(folder) == before  # nothing rewritten
    r = cli("sweep", spec, "--runs-dir", runs, "--dry-run")
    assert "0 not finished" in r.output
    monkeypatch.chdir(tmp_path)  # `report sweep-t/` finds runs/sweep-t
    r = cli("report", "--runs-dir", "sweep-t/", "--title", "tiny")
    assert r.exit_code == 0, r.output
    table = (folder / "report.md").read_text()
    assert table.count(" ± ") == 3 and "| 2 | 0,1 |" in table  # mean ± std over the two seeds
    assert (folder / "frontier.png").stat().st_size > 0


class _InterruptAt:
    """A progress hook that sends SIGINT to this process at the given batch of the second run."""

    def __init__(self, batch):
        self.batch, self.runs, self.seen = batch, 0, 0

    def begin(self, start):
        pass

    def epoch_start(self, epoch, n_batches, done):
        if epoch == 0 and done == 0:
            self.runs += 1

    def batch_end(self, loss, net_seconds):
        if self.runs == 2:
            self.seen += 1
            if self.seen == self.batch:
                signal.raise_signal(signal.SIGINT)

    def epoch_end(self, record):
        pass


def test_interrupted_sweep_resumes_to_the_same_weights(tmp_path, tiny_h5):
    spec = load_spec(tiny_spec(tmp_path, tiny_h5, seeds="[0]", max_epochs=2))
    runs = expand(spec)
    results = train_sweep(spec, runs, tmp_path / "a", progress=_InterruptAt(batch=2))
    assert [s for _, s, _ in results] == ["new", "new"] and results[-1][2].interrupted
    assert not (tmp_path / "a" / "sweep-t" / runs[2].name).exists()  # the sweep stopped there
    results = train_sweep(spec, runs, tmp_path / "a")
    assert [s for _, s, _ in results] == ["done", "partial", "new"]
    train_sweep(spec, runs, tmp_path / "b")  # never interrupted
    for run in runs:
        a = torch.load(tmp_path / "a" / "sweep-t" / run.name / "last.pt", weights_only=False)
        b = torch.load(tmp_path / "b" / "sweep-t" / run.name / "last.pt", weights_only=False)
        assert a["state"]["epoch"] == 2 and a["state"]["finished"]
        for k in b["model"]:
            assert torch.equal(a["model"][k], b["model"][k]), (run.name, k)


def test_run_killed_before_its_first_checkpoint_starts_again(tmp_path, tiny_h5):
    spec_path = tiny_spec(tmp_path, tiny_h5, seeds="[0]")
    first = tmp_path / "runs" / "sweep-t" / "set-linear-4-2-s0"
    first.mkdir(parents=True)
    (first / "config.json").write_text("{}")
    r = cli("sweep", spec_path, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 0, r.output
    assert "starting again" in r.output
    assert json.loads((first / "config.json").read_text())["run"]["name"] == first.name
    assert len((first / "metrics.jsonl").read_text().splitlines()) == 1


def test_a_shard_without_runs_says_so_and_makes_no_folder(tmp_path, tiny_h5):
    spec = tiny_spec(tmp_path, tiny_h5, seeds="[0]")  # 3 configurations x 1 seed: shards 3 and 4 of 5 are empty
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs", "--shard", "4/5")
    assert r.exit_code == 0 and "shard 4/5: nothing to train" in r.output, r.output
    assert "summarise" not in r.output and "sweep-t" not in r.output
    assert not (tmp_path / "runs").exists()


def test_missing_data_is_one_line_and_nothing_written(tmp_path):
    spec = tiny_spec(tmp_path, tmp_path / "none.h5")
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1 and "gen-data --out" in r.output and not (tmp_path / "runs").exists()


def test_frontier_ends_each_family_at_its_largest_explored_model():
    from swarmctl.plots.frontier import plot_frontier
    from swarmctl.studies.report import ConfigSummary, frontier_panels, largest_explored

    def row(model, params, loss):
        return ConfigSummary(model, str(params), params, (0,), loss, 0.0, 1, 1.0, ("cpu",))

    rows = [row("a", 100, 0.5), row("a", 1000, 0.4), row("a", 5000, 0.45), row("b", 200, 0.6)]
    assert largest_explored(rows) == {"a": 5000, "b": 200}
    ax = plot_frontier(frontier_panels(rows)).axes[0]
    bars = [line for line in ax.get_lines() if line.get_marker() == "|"]
    assert sorted(float(line.get_xdata()[0]) for line in bars) == [200.0, 5000.0]
    assert ax.get_xscale() == "log"


"""The CPU job of the clustering table (`python -m tools.campaigns run OUT --device cpu`): runs trained one after
another in plan order, each finished run evaluated and recorded with its hardware, a stopped run resumed by the
next job, and the plan's CPU hours from the measured cost."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_PARAMS, tiered

import swarmctl
from swarmctl.training.checkpoint import load_checkpoint
from tools.campaigns import cpu, processes

ROOT = Path(__file__).resolve().parents[2]


def tiny_runs(linear_seeds=(0, 1)):
    """Seeds of a tiny set-linear and one of a tiny SWARM, in the shape of plan.table_runs()."""
    from swarmctl.config import ModelConfig

    out = []
    for model, opts, code, seeds in (("set-linear", ["--hidden", "8", "--layers", "1"], "8-1", linear_seeds),
                                     ("swarm", ["--hidden", "8", "--iters", "2", "--layers", "1"], "8-2-1", (0,))):
        cfg = ModelConfig(name=model, dim_hidden=8, n_layers=1, n_iter=2 if model == "swarm" else None)
        out += [{"name": f"{model}-{code}-s{s}", "model": model, "code": code, "seed": s, "options": opts,
                 "config": cfg} for s in seeds]
    return out


@pytest.fixture(autouse=True)
def _signals_as_they_were():
    """The job in this process takes SIGINT and SIGTERM for itself: give them back after each test, with its
    stop flag cleared, so that no later test in this process is stopped by that handler."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    processes.STOPPING.clear()
    for s, h in handlers.items():
        signal.signal(s, h)


@pytest.fixture
def table(tmp_path, monkeypatch):
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset

    data = tmp_path / "data.h5"
    generate_dataset(data, ClusteringParams(**{**TINY_PARAMS, "n_tasks": 40}), seed=0)
    root = tmp_path / "campaigns"
    (root / cpu.CPU).mkdir(parents=True)
    monkeypatch.setattr(cpu, "table_runs", tiny_runs)
    return root, data


class _Finished:
    """What :func:`processes.launch` returns, for a command already run to its end: its exit code."""

    def __init__(self, code: int) -> None:
        self.returncode, self.pid = code, os.getpid()

    def wait(self, timeout=None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode


def _launch_in_this_process(cmd, logfile, extra_env=None, cpus=None):
    """``processes.launch`` for a ``python -m swarmctl ...`` command, run to its end in this process: the command's
    own arguments and the variables the job sets for swarmctl, its output appended to ``logfile`` (the process
    launch itself: test_a_job_command_runs_in_a_process_of_its_own_with_its_log)."""
    from typer.testing import CliRunner

    from swarmctl.cli import app

    assert cmd[:3] == [sys.executable, "-m", "swarmctl"], cmd
    import torch

    env = {k: v for k, v in processes.env(extra_env).items() if k.startswith("SWARMCTL_") or k == "COLUMNS"}
    threads = torch.get_num_threads()  # the command's --threads applies to this process: given back after it
    try:
        result = CliRunner().invoke(app, cmd[3:], env=env)
    finally:
        torch.set_num_threads(threads)
    with open(logfile, "a") as fh:
        fh.write(result.output)
    return _Finished(result.exit_code)


def test_a_job_command_runs_in_a_process_of_its_own_with_its_log(tmp_path):
    """Every command of a job is `python -m swarmctl ...` in a process of its own, with this swarmctl first on its
    path, its output appended to its log file."""
    log = tmp_path / "logs" / "version.txt"
    log.parent.mkdir()
    log.write_text("earlier\n")
    proc = processes.start(["--version"], log)
    assert isinstance(proc, subprocess.Popen) and processes.finish(proc, 120) == 0
    text = log.read_text()
    assert text.startswith("earlier\n") and swarmctl.__version__ in text


# the job's commands in this process in the default suite, in processes of their own in the slow one
@pytest.mark.parametrize("own_processes", [tiered(False, default=True), tiered(True, default=False)])
def test_the_cpu_job_trains_evaluates_and_records_its_runs_in_plan_order(table, tmp_path, monkeypatch, cli,
                                                                        own_processes):
    root, data = table
    if not own_processes:
        monkeypatch.setattr(processes, "launch", _launch_in_this_process)
    (root / cpu.CPU / cpu.COST).write_text(json.dumps({"rows": [  # SWARM measured cheaper: its row runs first
        {"model": "swarm", "code": "8-2-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 1.0}]},
        {"model": "set-linear", "code": "8-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 2.0}]}]}))
    assert [r["name"] for r in cpu.cpu_runs(root)] == ["swarm-8-2-1-s0", "set-linear-8-1-s0", "set-linear-8-1-s1"]
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=())[:1])  # one run: two processes
    kernels_off, launch = [], processes.launch  # what each command of the job sees of the fused kernels' switch

    def spy(cmd, logfile, extra_env=None, cpus=None):
        kernels_off.append(processes.env(extra_env).get("SWARMCTL_NO_EXT", "") not in ("", "0"))
        return launch(cmd, logfile, extra_env, cpus)

    monkeypatch.setattr(processes, "launch", spy)
    code = cpu.run_cpu_job(root, tmp_path / "out", wall=600, threads=1, data=data, minutes=0.01)
    assert code == 0
    assert kernels_off == [False, False]  # train and eval run the fused CPU kernels, as `swarmctl train` does
    progress = json.loads((root / cpu.CPU / "progress.json").read_text())
    assert list(progress["runs"]) == ["swarm-8-2-1-s0"]
    for name, rec in progress["runs"].items():
        run = root / cpu.CPU / "runs" / name
        ev = json.loads((run / "eval-val.json").read_text())
        assert rec["eval_loss"] == ev["loss"] and rec["epochs"] >= 1 and "1 thread" in rec["hardware"]
        assert rec["side_by_side"] == 1
        for ckpt in (load_checkpoint(run / "last.pt"), load_checkpoint(run / "best.pt")):  # weights only
            assert ckpt.optimizer is None and ckpt.model
        assert load_checkpoint(run / "last.pt").state.finished
    assert progress["sessions"][-1]["threads"] == 1 and len(progress["sessions"][-1]["runs"]) == 1
    # a finished run is read, not continued: a resume says why it cannot, in one line
    r = cli("train", "swarm", "--resume", root / cpu.CPU / "runs" / "swarm-8-2-1-s0", "--minutes", "1")
    assert r.exit_code == 1 and "holds weights only" in r.output and "Traceback" not in r.output
    # a second job finds nothing left and changes nothing
    before = (root / cpu.CPU / "progress.json").read_text()
    assert cpu.run_cpu_job(root, tmp_path / "out2", wall=600, threads=1, data=data, minutes=0.01) == 0
    assert (root / cpu.CPU / "progress.json").read_text() == before


def test_the_plan_gives_each_rows_cpu_hours_from_the_measured_cost(table):
    root, _ = table
    (root / cpu.CPU / cpu.COST).write_text(json.dumps({"rows": [
        {"model": "set-linear", "code": "8-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 20.0},
                                                           {"threads": 2, "s_per_epoch": 12.0}]}]}))
    rows = {r.model: r for r in cpu.cpu_plan(root)}
    assert rows["set-linear"].epoch_s == {1: 20.0, 2: 12.0}
    assert rows["set-linear"].epochs_per_run == pytest.approx(180)  # 3,600 net seconds at 20 s an epoch
    assert rows["set-linear"].hours_protocol == pytest.approx(3 * 1.05)  # 3 seeds x 60 min, 5 % evaluation
    assert rows["swarm"].epoch_s == {} and rows["swarm"].epochs_per_run is None  # not measured: no guess
    assert rows["set-linear"].flat_minutes is None and "once a seed has finished" in rows["set-linear"].note


def test_a_flat_curve_is_read_off_the_finished_runs_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    losses = [1.0, 0.7, 0.6, 0.505, 0.501, 0.5]
    (run / "metrics.jsonl").write_text("".join(json.dumps({"epoch": i, "train_loss": v, "val_loss": v, "best_val": v,
                                                                      "lr": 0.01, "net_seconds": 60.0 * (i + 1),
                                                                      "backtracked": False})
                                               + "\n" for i, v in enumerate(losses)))
    assert cpu._flat_minutes(run) == pytest.approx(4.0)  # 0.505 is within 1 % of 0.5: epoch 3, 4 net minutes


def test_the_plan_states_each_rows_hours_for_three_seeds_and_to_a_flat_curve_only_where_one_was_seen(table,
                                                                                                     monkeypatch):
    """Every row: CPU hours for three seeds at the protocol; to a flat curve an estimate where the finished seeds'
    curves went flat, 'more than' the protocol's hours where they were still improving at its end."""
    from tools.campaigns.cli import cpu_plan_line

    root, _ = table
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=(0,)))
    runs = root / cpu.CPU / "runs"
    curves = {"set-linear-8-1-s0": [1.0, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],  # flat after 3 of 10 minutes
              "swarm-8-2-1-s0": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]}  # still improving at the end
    for name, losses in curves.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.jsonl").write_text("".join(
            json.dumps({"epoch": i, "train_loss": v, "val_loss": v, "best_val": v, "lr": 0.01,
                        "net_seconds": 360.0 * (i + 1), "eval_seconds": 0.0, "backtracked": False}) + "\n"
            for i, v in enumerate(losses)))
    (root / cpu.CPU / "progress.json").write_text(json.dumps({"campaign": cpu.CPU, "sessions": [], "runs": {
        name: {"eval_loss": 0.5, "epochs": 10} for name in curves}}))
    rows = {r.model: r for r in cpu.cpu_plan(root)}
    flat, improving = rows["set-linear"], rows["swarm"]
    assert flat.hours_seeds == pytest.approx(3.0) and flat.hours_protocol == pytest.approx(2.0)  # 2 seeds left
    assert flat.hours_flat == pytest.approx(3 * 18 / 60)  # three seeds to the third epoch's 18 net minutes
    assert improving.flat_minutes == pytest.approx(60) and improving.hours_flat is None
    assert "3.0 CPU h for 3 seeds at 60 net min a run, 2.0 left; to a flat curve: 0.9 CPU h for 3 seeds" \
        in cpu_plan_line(flat)
    assert "3.0 CPU h for 3 seeds at 60 net min a run, 2.0 left; to a flat curve: more than 3.0 CPU h for 3 seeds" \
        in cpu_plan_line(improving)


def _shipped_record(name, model, code, epochs, best, batch=100, data="data/clustering-seed0.h5") -> dict:
    """A shipped model's record as the GPU campaigns write it (the fields the CPU plan reads)."""
    return {"file": f"{name}.pt", "model": model, "code": code, "task": "clustering", "epochs": epochs,
            "best_epoch": best, "trained_on": "NVIDIA H200 (torch 2.11.0+cu130), alone on the card",
            "config": {"model": {"name": model}, "train": {"batch_size": batch}, "data": {"path": data}}}


def _ship(shipped: Path, record: dict) -> None:
    (shipped / record["file"]).write_bytes(b"weights")
    (shipped / record["file"]).with_suffix(".json").write_text(json.dumps(record))


def test_a_row_without_a_finished_seed_takes_a_lower_bound_from_a_shipped_model_still_improving(table,
                                                                                                  monkeypatch):
    """Before any CPU seed of a row has finished: a shipped model of the same configuration, data and batch size
    that still improved near its last epoch means a flat curve needs more than that many epochs on this CPU."""
    from tools.campaigns.cli import cpu_plan_line

    root, _ = table
    (root / cpu.CPU / cpu.COST).write_text(json.dumps({"rows": [
        {"model": "swarm", "code": "8-2-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 100.0}]},
        {"model": "set-linear", "code": "8-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 10.0}]}]}))
    shipped = root / "shipped"
    shipped.mkdir()
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(shipped))

    def ship(name, model, code, epochs, best, batch=100, data="data/clustering-seed0.h5"):
        _ship(shipped, _shipped_record(name, model, code, epochs, best, batch, data))

    ship("swarm-improving", "swarm", "8-2-1", epochs=100, best=97)
    ship("linear-flat", "set-linear", "8-1", epochs=100, best=40)  # flat long before its end: no bound
    rows = {r.model: r for r in cpu.cpu_plan(root)}
    assert rows["swarm"].hours_flat_more == pytest.approx(3 * 100 * 100.0 * 1.05 / 3600)  # 5 % evaluation
    assert "to a flat curve: more than 8.8 CPU h for 3 seeds" in cpu_plan_line(rows["swarm"])
    assert "NVIDIA H200, the same data) still improved at epoch 97 of its 100" in rows["swarm"].note
    assert rows["set-linear"].hours_flat_more is None and "once a seed has finished" in rows["set-linear"].note
    for other in ({"batch": 50}, {"data": "data/demo-seed0.h5"}):  # another batch size or data: not comparable
        (shipped / "swarm-improving.json").unlink()
        ship("swarm-improving", "swarm", "8-2-1", epochs=100, best=97, **other)
        assert {r.model: r for r in cpu.cpu_plan(root)}["swarm"].hours_flat_more is None


def _spoil(record: dict, where: str, value) -> dict:
    """``record`` with the field at the dotted path ``where`` set to ``value`` (``KeyError``: removed)."""
    *parents, key = where.split(".")
    inner = record
    for k in parents:
        inner = inner[k]
    if value is KeyError:
        del inner[key]
    else:
        inner[key] = value
    return record


@pytest.fixture
def plan_root(tmp_path, monkeypatch):
    """A campaigns folder for the tiny table's plan, without its data (what status reads, no job)."""
    root = tmp_path / "campaigns"
    (root / cpu.CPU).mkdir(parents=True)
    monkeypatch.setattr(cpu, "table_runs", tiny_runs)
    return root


@pytest.fixture
def swarm_shipped(plan_root, monkeypatch):
    """The tiny table's campaigns folder with SWARM's cost measured, and an empty folder of shipped models in use."""
    root = plan_root
    (root / cpu.CPU / cpu.COST).write_text(json.dumps({"rows": [
        {"model": "swarm", "code": "8-2-1", "timings": [{"threads": 1, "cpu_s_per_epoch": 100.0}]}]}))
    shipped = root / "shipped"
    shipped.mkdir()
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(shipped))
    return root, shipped


@pytest.mark.parametrize("where, value", [
    ("best_epoch", 100), ("best_epoch", 250), ("best_epoch", -1), ("best_epoch", 97.5), ("best_epoch", "97"),
    ("best_epoch", True), ("epochs", 0), ("epochs", True), ("epochs", KeyError), ("best_epoch", KeyError),
    ("config.train", KeyError), ("config.data", KeyError), ("config.train", [100]), ("config.data", "seed0.h5"),
    ("config.data.path", 5), ("config.train.batch_size", None)])
def test_a_shipped_record_that_does_not_hold_a_curve_gives_no_bound_and_no_traceback(swarm_shipped, where, value):
    """A shipped record whose epochs, best epoch or training config are missing, of the wrong type or out of range
    (the best epoch counts from 0: 100 of 100 epochs is past its last) claims no lower bound, and raises nothing."""
    from tools.campaigns.cli import cpu_plan_line

    root, shipped = swarm_shipped
    _ship(shipped, _spoil(_shipped_record("swarm-improving", "swarm", "8-2-1", epochs=100, best=97), where, value))
    row = {r.model: r for r in cpu.cpu_plan(root)}["swarm"]  # what status prints: no exception out of it
    assert row.hours_flat_more is None and "more than" not in cpu_plan_line(row)


def test_a_shipped_records_card_is_named_only_where_the_record_names_one(swarm_shipped):
    root, shipped = swarm_shipped
    _ship(shipped, _spoil(_shipped_record("swarm-improving", "swarm", "8-2-1", epochs=100, best=99), "trained_on",
                          None))
    note = {r.model: r for r in cpu.cpu_plan(root)}["swarm"].note
    assert "(a GPU, the same data) still improved at epoch 99 of its 100" in note and "None" not in note


def test_the_cpu_job_refuses_a_missing_data_file_in_one_line(campaigns_cli, tmp_path):
    (tmp_path / "campaigns").mkdir()
    r = campaigns_cli("run", tmp_path / "out", "--device", "cpu", "--campaigns", tmp_path / "campaigns",
                      "--clustering-data", tmp_path / "none.h5")
    assert r.exit_code == 1 and "swarmctl gen-data --seed 0" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_the_cpu_job_refuses_an_unknown_device(campaigns_cli, tmp_path):
    r = campaigns_cli("run", tmp_path / "out", "--device", "tpu")
    assert r.exit_code == 2 and "cuda, cpu" in r.output


@pytest.mark.parametrize("flag", ["--parallel", "--threads"])
def test_the_cpu_jobs_options_are_refused_for_the_card_job_in_one_line(campaigns_cli, tmp_path, flag):
    r = campaigns_cli("run", tmp_path / "out", flag, "2")
    assert r.exit_code == 2 and f"`{flag}` applies to the CPU table's job only" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [1, 2])
def test_a_cpu_job_stopped_by_sigterm_leaves_its_run_to_the_next_job(table, tmp_path, parallel):
    """SIGTERM (a wall-time limit's notice) saves the runs in progress; the next job resumes them, not restarts
    them."""
    if len(os.sched_getaffinity(0)) < parallel:
        pytest.skip(f"{parallel} runs side by side need {parallel} CPUs")
    root, data = table
    paths = [str(ROOT), str(Path(__file__).parent), str(Path(__file__).parents[1])]
    script = (f"import sys, pathlib; sys.path[:0] = {paths!r};"
              "import test_cpu_table as t; from tools.campaigns import cpu; cpu.table_runs = t.tiny_runs;"
              f"sys.exit(cpu.run_cpu_job(pathlib.Path({str(root)!r}), pathlib.Path({str(tmp_path / 'out')!r}), "
              f"600, 1, pathlib.Path({str(data)!r}), minutes=5, parallel={parallel}))")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline, metrics = time.monotonic() + 120, []
    while time.monotonic() < deadline and len(metrics) < parallel:  # every slot's run past its first epoch
        time.sleep(0.5)
        metrics = sorted((root / cpu.CPU / "runs").glob("*/metrics.jsonl"))
    assert len(metrics) == parallel, f"{len(metrics)} of {parallel} runs reached their first epoch"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    assert not json.loads((root / cpu.CPU / "progress.json").read_text())["runs"]
    epochs = {}
    for m in metrics:
        assert (m.parent / "last.pt").is_file()
        epochs[m.parent.name] = len(m.read_text().splitlines())
        r = next(r for r in tiny_runs() if r["name"] == m.parent.name)
        assert cpu._train_args(r, root / cpu.CPU / "runs", data, 5)[2] == "--resume"
    assert cpu.run_cpu_job(root, tmp_path / "out2", wall=600, threads=1, data=data, minutes=0.05) == 0
    progress = json.loads((root / cpu.CPU / "progress.json").read_text())
    for name, n in epochs.items():
        assert progress["runs"][name]["epochs"] >= n  # continued: its earlier epochs are still there


@pytest.mark.parametrize("cost", ['{"rows": [', "[1]", '{"rows": 5}', '{"rows": [5, {"model": "swarm"}]}',
                                  '{"rows": [{"model": "swarm", "code": "8-2-1", "timings": "x"}]}',
                                  '{"rows": [{"model": "swarm", "code": "8-2-1", "timings": [5, {"threads": "1"}, '
                                  '{"threads": 0, "s_per_epoch": 3}, {"threads": 1, "cpu_s_per_epoch": true}]}]}'])
def test_a_damaged_cost_record_reads_as_not_measured(plan_root, campaigns_cli, cost):
    root = plan_root
    (root / cpu.CPU / cpu.COST).write_text(cost)
    assert cpu.read_cost(root) == {}
    r = campaigns_cli("status", "--campaigns", root)
    assert r.exit_code == 0 and "Traceback" not in r.output and "cost not measured" in r.output, r.output


@pytest.mark.parametrize("runs", ['{"set-linear-8-1-s0": {"eval_loss": "x", "epochs": 3}}',
                                  '{"set-linear-8-1-s0": {"eval_loss": 0.5}}', '{"set-linear-8-1-s0": 5}', "[1]"])
def test_a_progress_record_with_a_damaged_run_is_refused_in_one_line(plan_root, campaigns_cli, runs):
    root = plan_root
    (root / cpu.CPU / "progress.json").write_text(f'{{"campaign": "{cpu.CPU}", "sessions": [], "runs": {runs}}}')
    r = campaigns_cli("status", "--campaigns", root)
    assert r.exit_code == 1 and "Traceback" not in r.output and "progress.json is damaged" in r.output, r.output


def test_a_damaged_shipped_record_is_named_once(swarm_shipped, campaigns_cli):
    """status reads the shipped records once per row and per table: their warnings are said once each, not once a
    reading (a damaged record was named 26 times)."""
    root, shipped = swarm_shipped
    (shipped / "swarm.pt").write_bytes(b"weights")
    (shipped / "swarm.json").write_text('{"file": "swarm.pt", "epo')
    r = campaigns_cli("status", "--campaigns", root)
    warned = [line for line in r.output.splitlines() if line.startswith("warning:")]
    assert r.exit_code == 0 and warned and len(warned) == len(set(warned)), r.output


def test_a_command_held_to_cpus_runs_on_those_cpus_only(tmp_path):
    """--parallel holds each run to cores of its own: the command (and every thread it starts) sees only those."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may use one CPU: a command held to it looks like one that is not")
    log, probe = tmp_path / "affinity.txt", tmp_path / "probe.py"
    probe.write_text("import os; print(sorted(os.sched_getaffinity(0)))")
    one = max(os.sched_getaffinity(0))
    assert processes.finish(processes.start([str(probe)], log, cpus=frozenset({one})), 60) == 0
    assert log.read_text().strip() == str([one])


def test_the_slots_are_disjoint_cores_and_too_many_are_refused_in_one_line(monkeypatch, campaigns_cli, table,
                                                                          tmp_path):
    monkeypatch.setattr(cpu, "SYS_CPU", tmp_path / "no-topology")  # each CPU a core of its own, whatever this machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpu.cpu_slots(1, 4) == [None]  # one run at a time: not held
    assert cpu.cpu_slots(2, 2) == [frozenset({0, 1}), frozenset({2, 3})]
    with monkeypatch.context() as m:  # a system that cannot hold a process to cores: side by side, not held
        m.delattr(os, "sched_getaffinity")
        m.setattr(os, "cpu_count", lambda: 4)
        assert cpu.cpu_slots(2, 2) == [None, None]
        with pytest.raises(cpu.ConfigError, match="may use 4"):
            cpu.cpu_slots(5, 1)
    root, data = table
    r = campaigns_cli("run", tmp_path / "out", "--device", "cpu", "--parallel", "3", "--threads", "2",
                      "--campaigns", root, "--clustering-data", data)
    assert r.exit_code == 2 and "need 6 cores" in r.output and "may use 4" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()
    assert not (root / cpu.CPU / "progress.json").exists()


def _command(cmd: list[str]) -> tuple[str, str]:
    """What a CPU job's command does and for which run: `python -m swarmctl --threads 1 train|eval ...`."""
    what = cmd[5]
    return what, Path(cmd[6] if what == "eval" else cmd[cmd.index("--name") + 1]).name


def test_runs_side_by_side_each_on_its_own_cores_and_a_failed_run_starts_no_other(table, tmp_path, monkeypatch):
    """Two slots: the runs go to them in plan order, each command of a run (training, evaluation) on its slot's
    cores; a training that fails stops new runs from starting while the other slot's run finishes and is
    recorded."""
    root, data = table
    monkeypatch.setattr(cpu, "SYS_CPU", tmp_path / "no-topology")  # each CPU a core of its own, whatever this machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=(0, 1, 2)))
    names = [r["name"] for r in cpu.cpu_runs(root)]
    seen: list[tuple[str, str, frozenset | None]] = []

    def fake(cmd, logfile, extra_env=None, cpus=None):
        what, run = _command(cmd)
        seen.append((what, run, cpus))
        if what == "train" and run == names[0]:
            return _Finished(1)  # the first run's training fails
        return _launch_in_this_process(cmd, logfile, extra_env)

    monkeypatch.setattr(processes, "launch", fake)
    assert cpu.run_cpu_job(root, tmp_path / "out", wall=600, threads=1, data=data, minutes=0.01, parallel=2) == 0
    assert [(w, r) for w, r, _ in seen] == [("train", names[0]), ("train", names[1]), ("eval", names[1])]
    assert [c for _, _, c in seen] == [frozenset({0}), frozenset({1}), frozenset({1})]
    progress = json.loads((root / cpu.CPU / "progress.json").read_text())
    assert list(progress["runs"]) == [names[1]]  # the failed run is left to the next job, nothing else started
    session = progress["sessions"][-1]
    assert session["parallel"] == 2 and [m["train_exit"] for m in session["runs"]] == [1, 0]
    assert progress["runs"][names[1]]["side_by_side"] == 2


def test_a_second_cpu_job_on_the_same_table_is_refused_in_one_line(table, tmp_path, campaigns_cli):
    """Two jobs on one table would train one run twice and write over each other's progress.json."""
    from swarmctl.runs import run_lock

    root, data = table
    with run_lock(root / cpu.CPU):
        r = campaigns_cli("run", tmp_path / "out", "--device", "cpu", "--campaigns", root, "--clustering-data",
                          data, "--wall", 600)
    assert r.exit_code == 1 and "another CPU job" in r.output and str(os.getpid()) in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()
    assert not (root / cpu.CPU / "progress.json").exists() and not (root / cpu.CPU / "runs").exists()


_FAKE_COMMAND = """\
import os, signal, sys, time
stamps, signal_job = sys.argv[1], sys.argv[5]
save_s, run_s, code = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
result = sys.argv[6] if len(sys.argv) > 6 else None  # an evaluation's: written when it ends by itself, exit 0
def stamp(what):
    with open(stamps, "a") as fh:
        fh.write(f"{what} {time.monotonic()} {os.getpid()}\\n")
def stop(signum, frame):
    stamp("term")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a trainer saving its last.pt: a second SIGTERM changes nothing
    time.sleep(save_s)
    stamp("saved")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
stamp("start")
if signal_job == "1":
    os.kill(os.getppid(), signal.SIGTERM)  # the job gets its SIGTERM while this command runs
time.sleep(run_s)
if result and code == 0:
    os.makedirs(os.path.dirname(result), exist_ok=True)
    with open(result, "w") as fh:
        fh.write('{"loss": 0.5}')
sys.exit(code)
"""


def _fake_commands(tmp_path, monkeypatch, behaviour):
    """``processes.launch`` starting, for each command of the job, a process that stands for it: ``behaviour(what,
    run)`` -> (seconds it takes to save after SIGTERM, seconds it runs, exit code, whether it sends the job SIGTERM
    once started); an evaluation that ends with exit 0 writes its result. Returns ``stamps(what, run)``: (event,
    monotonic time) lines the process wrote."""
    script = tmp_path / "fake_command.py"
    script.write_text(_FAKE_COMMAND)
    launch = processes.launch

    def fake(cmd, logfile, extra_env=None, cpus=None):
        what, run = _command(cmd)
        save_s, run_s, code, signal_job = behaviour(what, run)
        result = [str(Path(cmd[6]) / "eval-val.json")] if what == "eval" else []
        return launch([sys.executable, str(script), str(tmp_path / f"{what}-{run}.txt"), str(save_s), str(run_s),
                       str(code), "1" if signal_job else "0", *result], logfile, extra_env)

    monkeypatch.setattr(processes, "launch", fake)

    def stamps(what, run):
        path = tmp_path / f"{what}-{run}.txt"
        lines = path.read_text().split("\n") if path.is_file() else []
        return [(line.split()[0], float(line.split()[1])) for line in lines if line]

    return stamps


def test_every_training_past_the_wall_minus_the_reserve_is_stopped_at_once(table, tmp_path, monkeypatch):
    """At the wall minus the evaluation reserve each slot's training gets SIGTERM at the same moment: one stopped
    after the other has saved would eat the reserve (and, slot after slot, the wall)."""
    root, data = table
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=(0, 1)))
    monkeypatch.setattr(cpu, "cpu_slots", lambda parallel, threads: [None] * parallel)
    for name, value in (("EVAL_RESERVE", 1.0), ("MIN_TRAIN_S", 0.0), ("POLL_S", 0.05)):
        monkeypatch.setattr(cpu, name, value)
    stamps = _fake_commands(tmp_path, monkeypatch, lambda what, run: (0.8, 600, 0, False))
    names = [r["name"] for r in cpu.cpu_runs(root)][:2]
    assert cpu.run_cpu_job(root, tmp_path / "out", wall=2.0, threads=1, data=data, minutes=1, parallel=2) == 0
    terms = [t for n in names for what, t in stamps("train", n) if what == "term"]
    assert len(terms) == 2 and abs(terms[0] - terms[1]) < 0.5, terms
    session = json.loads((tmp_path / "out" / "session.json").read_text())
    assert [m["train_exit"] for m in session["runs"]] == [130, 130]  # both saved their last.pt


def test_a_signal_to_the_job_leaves_a_training_the_time_it_needs_to_save(table, tmp_path, monkeypatch):
    """SIGTERM to the job while one slot evaluates and the other trains: the evaluation stops, the training saves
    its last.pt however long that takes (a step of a large model on one thread), never SIGKILLed for it."""
    root, data = table
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=(0, 1)))
    monkeypatch.setattr(cpu, "cpu_slots", lambda parallel, threads: [None] * parallel)
    monkeypatch.setattr(cpu, "POLL_S", 0.05)
    monkeypatch.setattr(processes, "GRACE_S", 0.1)  # the grace of a command past its time: shorter than the save
    first, second = [r["name"] for r in cpu.cpu_runs(root)][:2]

    def behaviour(what, run):
        if what == "train":  # the first run's training ends at once, the second one's trains on
            return (1.3, 0.0 if run == first else 600, 0, False)
        return (0.0, 600, 0, True)  # the first run's evaluation: the job gets SIGTERM meanwhile

    stamps = _fake_commands(tmp_path, monkeypatch, behaviour)
    assert cpu.run_cpu_job(root, tmp_path / "out", wall=600, threads=1, data=data, minutes=1, parallel=2) == 130
    assert [what for what, _ in stamps("train", second)] == ["start", "term", "saved"]
    session = json.loads((tmp_path / "out" / "session.json").read_text())
    assert session["stopped_by"] == "SIGTERM"
    assert {m["run"]: m["train_exit"] for m in session["runs"]} == {first: 0, second: 130}


def test_an_error_in_the_job_stops_the_other_slots_training_the_graceful_way(table, tmp_path, monkeypatch):
    """A run the job cannot record (its last.pt gone) ends the job with its error; the run training in the other
    slot gets SIGTERM and saves its last.pt, instead of training on unattended after the job has ended."""
    from swarmctl.errors import CheckpointError

    root, data = table
    monkeypatch.setattr(cpu, "table_runs", lambda: tiny_runs(linear_seeds=(0, 1)))
    monkeypatch.setattr(cpu, "cpu_slots", lambda parallel, threads: [None] * parallel)
    monkeypatch.setattr(cpu, "POLL_S", 0.05)
    first, second = [r["name"] for r in cpu.cpu_runs(root)][:2]
    # the first run trains (writing no checkpoint) and is evaluated at once; the second one trains on
    stamps = _fake_commands(tmp_path, monkeypatch,
                            lambda what, run: (0.2, 0.0 if run == first else 600, 0, False))
    try:
        with pytest.raises(CheckpointError, match="last.pt"):
            cpu.run_cpu_job(root, tmp_path / "out", wall=600, threads=1, data=data, minutes=1, parallel=2)
        assert [what for what, _ in stamps("train", second)] == ["start", "term", "saved"]
        assert not processes.LIVE  # nothing the job started is left running
    finally:
        for proc in list(processes.LIVE):
            proc.kill()
            proc.wait()
            processes.LIVE.discard(proc)


def test_a_cpu_job_starts_after_one_killed_by_sigkill(table, tmp_path, campaigns_cli):
    """A job killed by SIGKILL leaves its .lock file, with its PID, behind: the next job still starts."""
    root, data = table
    lock = root / cpu.CPU / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fh = open(sys.argv[1], 'w'); "
                               "fcntl.flock(fh, fcntl.LOCK_EX); fh.write(str(os.getpid())); fh.flush(); "
                               "print('held', flush=True); time.sleep(600)", str(lock)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert lock.read_text() == str(holder.pid)
    r = campaigns_cli("run", tmp_path / "out", "--device", "cpu", "--campaigns", root, "--clustering-data", data,
                      "--wall", 1)  # too short for a run: the job starts, records and ends
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "session.json").read_text())["runs"] == []


def test_runs_side_by_side_never_share_a_core_of_two_threads(monkeypatch, tmp_path):
    """Where two CPUs are the threads of one core (simultaneous multithreading, often numbered side by side), the
    slots take one CPU of each core, and more runs than cores are refused: two runs on one core would each train
    at about half speed, their 60 net minutes no longer comparable."""
    for c in range(4):  # cores (0, 1) and (2, 3)
        (tmp_path / f"cpu{c}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{c}" / "topology" / "thread_siblings_list").write_text(f"{c - c % 2}-{c - c % 2 + 1}\n")
    monkeypatch.setattr(cpu, "SYS_CPU", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpu.cpu_slots(2, 1) == [frozenset({0}), frozenset({2})]
    with pytest.raises(cpu.ConfigError, match="need 4 cores"):
        cpu.cpu_slots(4, 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 2, 3})  # one core's second thread only
    assert cpu.cpu_slots(2, 1) == [frozenset({1}), frozenset({2})]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child told of its parent's death: Linux")
def test_a_job_killed_by_sigkill_leaves_no_command_running(tmp_path):
    """SIGKILL of the job (an out-of-memory killer, `kill -9`): each command it started gets SIGTERM (a training
    saves its last.pt) instead of training on unattended, holding its run's lock against the next job."""
    script, stamps = tmp_path / "fake_command.py", tmp_path / "stamps.txt"
    script.write_text(_FAKE_COMMAND)
    job = subprocess.Popen([sys.executable, "-c", "import sys, time; from tools.campaigns import processes; "
                            "processes.start([sys.argv[1], sys.argv[2], '0', '600', '0', '0'], "
                            "processes.Path(sys.argv[3]), cpus=None); print('started', flush=True); time.sleep(600)",
                            str(script), str(stamps), str(tmp_path / "log.txt")],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert job.stdout.readline().strip() == b"started"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "start" not in (stamps.read_text() if stamps.is_file() else ""):
            time.sleep(0.05)
    finally:
        job.kill()
        job.wait()
        job.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "saved" not in stamps.read_text():
        time.sleep(0.05)
    lines = [line.split() for line in stamps.read_text().splitlines()]
    if lines[-1][0] != "saved":  # the command left running: stopped here
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(lines[0][2]), signal.SIGKILL)
    assert [line[0] for line in lines] == ["start", "term", "saved"]

"""The GPU job (`python -m tools.campaigns run`) on the CPU: its mode choice, its wall, and what a kill leaves.

A GPU job is rare and short; whatever stops it (its wall, a scheduler's SIGTERM, a SIGKILL) must leave in
OUT everything finished by then, readable, and within what a job may return (8 files of at most 16 MiB)."""

import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import fresh_campaigns, write_fake_mnist

from swarmctl.tasks import get_task
from swarmctl.training.modes import Measured, choose_step_mode, step_timings
from tools.campaigns.plan import choose_flags, measured_modes, trainer_mode

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "benchmarks" / "gpu"

EAGER_MOG = {"mog_ms_per_step": {"eager": 16.0, "graphs": 5.0}, "warmup_s": {"mog/graphs": 2.0},
             "compile_probe": {"task": "mog", "compile_s": 200.0, "steady_ms_per_step": 3.0, "finished": True}}


def test_the_mode_choice_counts_compile_time_against_the_share():
    """Compiled MoG steps are fastest (3 ms) but cost 200 s to compile: graphs (5 ms, 2 s to capture) win a
    300 s share; a share long enough to repay the compile picks it; eager when graphs failed their tests.
    Each becomes `train --step MODE`."""
    assert choose_flags(EAGER_MOG, True, {"mog": 300}) == {"mog": ["--step", "graphs"]}
    assert choose_flags(EAGER_MOG, True, {"mog": 3000}) == {"mog": ["--step", "compile"]}
    assert choose_flags(EAGER_MOG, False, {"mog": 150}) == {"mog": ["--step", "eager"]}  # no time to compile
    unfinished = {**EAGER_MOG, "compile_probe": {"task": "mog", "compile_s": ">60", "finished": False}}
    assert choose_flags(unfinished, True, {"mog": 10**6}) == {"mog": ["--step", "graphs"]}
    assert choose_flags(EAGER_MOG, True, {"mog": 3000}, device_type="cpu") == {"mog": ["--step", "eager"]}


def test_with_nothing_measured_the_job_takes_the_trainers_own_choice():
    """No timings in this job: the mode `train --step auto` would pick on the job's card from the shipped step
    timings, for the same budget; the graph modes left out when the GPU tests failed; eager on a card the
    timings do not name (or none named), as `train` trains there."""
    card = next(iter(step_timings().values()))
    shipped = card.measured("mog", get_task("mog").proven_modes)
    here = {"device": {"name": card.card, "type": "cuda", "torch": card.torch}}
    for budget in (20, 300, 5000):
        own = choose_step_mode("auto", "cuda", shipped, budget).mode.name
        assert choose_flags(here, True, {"mog": budget}) == {"mog": ["--step", own]}
        no_graphs = {m: v for m, v in shipped.items() if "graphs" not in m}
        own = choose_step_mode("auto", "cuda", no_graphs, budget).mode.name
        assert choose_flags(here, False, {"mog": budget}) == {"mog": ["--step", own]}
        for unmeasured in ({}, {"device": {"name": "Card Z", "type": "cuda"}}):
            assert choose_flags(unmeasured, True, {"mog": budget}) == {"mog": ["--step", "eager"]}
    assert choose_flags(here, True, {"mog": 300}) != {"mog": ["--step", "eager"]}  # the card's timings count
    assert choose_flags({}, True, {}) == {}  # a task with no share in this job: nothing to choose


def test_only_the_modes_a_task_lists_as_proven_are_chosen():
    """The step timings name modes by their precision (tf32, bf16-autocast, fp32); bf16 is chosen only where
    the task lists it as proven (not MoG), fp32 never (not a trainer mode)."""
    assert [trainer_mode(n) for n in ("tf32", "eager", "tf32+graphs", "graphs+bf16", "bf16-autocast", "fp32",
                                      "triton", "triton+graphs+bf16", "bf16+triton", "tf32+triton+graphs",
                                      "triton+compile")] == \
        ["eager", "eager", "graphs", "amp+graphs", "amp", None, "triton", "amp+triton+graphs", "amp+triton",
         "triton+graphs", None]
    fast_bf16 = {"mog_ms_per_step": {"eager": 16.0, "bf16-autocast": 1.0, "fp32": 0.5},
                 "image_s_per_epoch": {"eager": 30.0, "bf16-autocast": 20.0, "fp32": 1.0}}
    assert choose_flags(fast_bf16, True, {"mog": 600, "image": 600}) == {"mog": ["--step", "eager"],
                                                                        "image": ["--step", "amp"]}
    assert measured_modes({"clustering_s_per_epoch": {"tf32+graphs": 0.9}, "warmup_s": {"clustering/tf32+graphs": 3.0}},
                          "clustering") == {"graphs": Measured(0.01, 3.0)}


def test_the_file_budget_lets_mog_and_an_image_campaign_take_turns(tmp_path):
    """MoG returns 5 files (mog.tgz and its last.pt in 4 parts), an image campaign 3, the clustering table 1,
    every job 2 (session.json, logs.tgz): all of them make 11, over the 8 a job returns. The checkpoint
    campaign with more committed sessions waits (ties: the smaller gap), the others run."""
    from tools.campaigns import plan

    root = fresh_campaigns(tmp_path / "campaigns")
    order = [("mog", 0.5), ("mnist", 0.2), ("clustering", 0.01)]
    assert [plan.returned_files(n) for n, _ in order] == [5, 3, 1]
    assert plan.within_files(order, root, 8) == ([("mog", 0.5), ("clustering", 0.01)], ["mnist"])  # a tie: the gap
    progress = json.loads((root / "mog" / "progress.json").read_text())
    progress["sessions"].append({"date": "d", "card": "c"})
    (root / "mog" / "progress.json").write_text(json.dumps(progress))
    assert plan.within_files(order, root, 8) == ([("mnist", 0.2), ("clustering", 0.01)], ["mog"])
    assert plan.within_files(order[:1] + order[2:], root, 8) == (order[:1] + order[2:], [])  # 8 files: all fit
    assert plan.within_files(order, root, limit=4) == ([("clustering", 0.01)], ["mog", "mnist"])


def _files_are_returnable(out: Path) -> dict | None:
    """What a job may return, readable: at most 8 files of at most 16 MiB, names of the allowed characters,
    session.json valid JSON, every archive complete. Returns session.json's content (None if not yet written)."""
    files = [p for p in out.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]  # a write cut short
    assert len(files) <= 8, sorted(p.name for p in files)
    for p in files:
        assert p.stat().st_size < 16 * 2**20 and all(c.isalnum() or c in "._-" for c in p.name), p.name
        if p.suffix == ".tgz":
            with tarfile.open(p) as tar:
                assert tar.getmembers()
    path = out / "session.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _session(tmp_path, wall, *extra, images=None, stderr=subprocess.STDOUT):
    """The job as a process of its own (its standard error on its standard output unless ``stderr``)."""
    root = tmp_path / "campaigns"
    if not root.exists():
        fresh_campaigns(root)
    images = images or write_fake_mnist(tmp_path / "images", gz=True)
    cmd = [sys.executable, "-m", "tools.campaigns", "run", str(tmp_path / "out"), "--wall", str(wall),
           "--campaigns", str(root), "--work", str(tmp_path / "work"), "--data-dir", str(images), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)


@pytest.mark.slow  # the job in a real process; the default suite runs the status and commit tools in process
def test_without_a_gpu_the_job_stops_after_its_first_phase_and_says_so(tmp_path):
    """A job sent to a machine without CUDA (a wrong partition, a broken driver) ends in seconds, not after
    its wall, with the machine's facts and the inputs checked written down; why it stopped is on its
    standard error, its log on its standard output."""
    t0 = time.monotonic()
    proc = _session(tmp_path, 30, stderr=subprocess.PIPE)
    output, errors = proc.communicate(timeout=60)
    assert proc.returncode == 1 and time.monotonic() - t0 < 30, output + errors
    assert "no CUDA on this machine" in errors and "no CUDA on this machine" not in output, (output, errors)
    assert "device: cpu (no CUDA)" in output, output
    facts = _files_are_returnable(tmp_path / "out")
    assert facts["card"] == "cpu (no CUDA)" and "0-inputs" in facts["phases"] and facts["missing"]["mnist"] == []
    assert facts["imports"]["torch"] and not str(facts["imports"]["h5py"]).startswith("FAILED")


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_phase_0_names_the_missing_image_files_and_that_campaign_is_skipped(tmp_path):
    empty = tmp_path / "no-images"
    empty.mkdir()
    proc = _session(tmp_path, 30, images=empty)
    output, _ = proc.communicate(timeout=60)
    facts = _files_are_returnable(tmp_path / "out")
    assert any("train-images-idx3-ubyte" in m for m in facts["missing"]["mnist"]), facts["missing"]
    assert "mnist: missing" in output and "skipped" in output


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_job_killed_at_any_moment_leaves_what_it_finished(tmp_path, how):
    """Smoke size on the CPU: kill the job at seeded random moments; OUT is always returnable, and after
    SIGTERM the job ends within seconds with session.json saying where it stopped and every campaign
    that finished packed."""
    images = write_fake_mnist(tmp_path / "images", gz=True)
    rng = random.Random(22 if how == "SIGTERM" else 23)
    for k, at in enumerate(sorted(rng.uniform(2, 45) for _ in range(4))):
        run = tmp_path / f"k{k}"
        run.mkdir()
        proc = _session(run, 400, "--smoke", images=images)
        time.sleep(at)
        if how == "SIGKILL":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=90)
        finally:
            if how == "SIGTERM":  # the job's commands end with it; nothing of theirs runs on
                time.sleep(1)
                with pytest.raises(ProcessLookupError):
                    os.killpg(proc.pid, 0)
        facts = _files_are_returnable(run / "out")
        if how == "SIGTERM" and proc.returncode == 130 and facts is None:  # it came while the job loaded
            assert "nothing half-written was left behind" in output, (at, output[-2000:])
            assert not (run / "out").exists() or not any((run / "out").iterdir()), (at, output[-2000:])
        elif how == "SIGTERM" and proc.returncode == 130:  # stopped (not already done at that moment)
            assert "stopped" in facts, (at, output[-2000:])
            assert set(facts.get("packed", [])) == {p.name[:-4] for p in (run / "out").glob("*.tgz")} - {"logs"}


@pytest.mark.slow
def test_a_signal_is_said_on_standard_error(tmp_path):
    """SIGINT once the job has begun (its first phase recorded): it stops with exit 130, and the lines that
    say so are on its standard error, not among its log's."""
    proc = _session(tmp_path, 400, "--smoke", stderr=subprocess.PIPE)
    try:
        t0 = time.monotonic()
        while not (tmp_path / "out" / "session.json").is_file() and time.monotonic() - t0 < 120:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, errors = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output + errors
    assert "SIGINT" in errors and "SIGINT" not in output, (output, errors)


def test_once_a_signal_came_the_job_starts_no_command(tmp_path):
    """After SIGINT or SIGTERM the job goes on through its quick steps only: a command it would start next
    (the data, an evaluation) is not started, and waiting for it returns at once with no exit code."""
    from tools.campaigns import processes

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    started = None
    try:
        processes.stop_on_signals()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs
        assert processes.STOPPING == ["SIGINT"]
        started = processes.start(["gen-data", "--out", str(tmp_path / "d.h5")], tmp_path / "gen-data.txt")
        assert started is None and not (tmp_path / "gen-data.txt").exists()
        assert processes.finish(started, 60) is None
    finally:
        if started is not None:
            started.kill()
            started.wait()
        processes.STOPPING.clear()
        for s, h in handlers.items():
            signal.signal(s, h)


@pytest.mark.slow
def test_the_smoke_job_returns_every_phase_in_order(tmp_path):
    proc = _session(tmp_path, 400, "--smoke")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    facts = _files_are_returnable(tmp_path / "out")
    assert list(facts["phases"]) == ["0-inputs", "1-gpu-tests", "2-timings", "3-campaigns"]
    assert facts["packed"] == ["mog", "clustering"] and facts["waiting"] == ["mnist"]  # 8 files: MNIST waits
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"session.json", "logs.tgz", "mog.tgz", "clustering.tgz",
                                                              *(f"mog-last.pt.part{k}" for k in range(4))}
    with tarfile.open(tmp_path / "out" / "logs.tgz") as tar:
        assert {"logs/gpu-tests.txt", "logs/bench.txt"} <= set(tar.getnames())
    assert {r["campaign"] for r in facts["paper_rows"]} == {"clustering", "mog", "mnist", "fashion-mnist", None}


@pytest.mark.slow
def test_a_smoke_job_leaves_a_carried_run_of_another_size_alone(tmp_path):
    """Trying the job with --smoke where the campaigns carry a real MoG run: the smoke job starts a tiny run of
    its own instead of training the full-size one on the CPU until its wall."""
    from swarmctl.config import DataConfig, ModelConfig
    from swarmctl.runs import start_run
    from tools.campaigns import parts

    root = fresh_campaigns(tmp_path / "campaigns")
    start_run(ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=2, n_layers=1),
              get_task("mog").train_config(steps_per_epoch=3, val_batches=2, max_epochs=1, device="cpu"),
              DataConfig(), tmp_path / "runs", "swarm-mog-1")
    parts.split(tmp_path / "runs" / "swarm-mog-1" / "last.pt", root / "mog", 16 << 20)
    proc = _session(tmp_path, 300, "--smoke", "--only", "mog")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    assert "leaves the carried run swarm-mog-1 (16-2-1) alone" in output, output[-3000:]
    with tarfile.open(tmp_path / "out" / "mog.tgz") as tar:
        configs = [json.load(tar.extractfile(n)) for n in tar.getnames() if n.endswith("/config.json")]
    assert [c["run"]["code"] for c in configs] == ["8-2-1"], configs  # the smoke run, not the carried one


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_the_batch_script_runs_the_job_from_the_repository_root(tmp_path):
    """`sbatch benchmarks/gpu/job.sh OUT` (here run directly, from elsewhere): the job starts, finds the
    repository, and on a machine without CUDA ends after its first phase."""
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(REPO), "PYTHON": sys.executable}
    res = subprocess.run(["bash", str(SCRIPTS / "job.sh"), str(tmp_path / "out"), "--wall", "30"],
                         capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env)
    assert res.returncode == 1 and "no CUDA on this machine" in res.stderr, res.stdout + res.stderr
    assert _files_are_returnable(tmp_path / "out")["phases"]["0-inputs"] >= 0
    bare = subprocess.run(["bash", str(SCRIPTS / "job.sh"), str(tmp_path / "out2"), "--wall", "30"],
                          capture_output=True,
                          text=True, timeout=90, env={**os.environ, "PYTHON": "/usr/bin/python3"})
    assert bare.returncode == 1 and "torch cannot be imported" in bare.stderr and "Traceback" not in bare.stderr


@pytest.fixture(scope="module")
def mog_checkpoint(tmp_path_factory):
    """A tiny MoG run's folder (8-2-1, 3 steps an epoch, 2 epochs) with its last.pt (Adam state included)."""
    from swarmctl.config import DataConfig, ModelConfig
    from swarmctl.runs import start_run

    runs = tmp_path_factory.mktemp("mog")
    start_run(ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2, n_layers=1),
              get_task("mog").train_config(steps_per_epoch=3, val_batches=2, max_epochs=2, device="cpu"),
              DataConfig(), runs, "swarm-mog-4")
    return runs / "swarm-mog-4"


def test_the_mog_checkpoint_comes_back_in_its_parts_and_never_over_the_limit(mog_checkpoint, tmp_path):
    """last.pt in MOG_PARTS parts in OUT (the job's file budget counts them), the manifest beside the run's
    files (inside mog.tgz); a checkpoint whose parts would exceed the per-file limit is not returned at all."""
    from tools.campaigns import parts, runners
    from tools.campaigns.plan import MOG_PARTS

    last = mog_checkpoint / "last.pt"
    out, keep = tmp_path / "out", tmp_path / "keep"
    out.mkdir()
    assert runners.return_mog_checkpoint(last, tmp_path / "work", out, keep, 16 << 20) == MOG_PARTS
    assert sorted(p.name for p in out.iterdir()) == [f"mog-last.pt.part{k}" for k in range(MOG_PARTS)]
    for p in out.iterdir():
        (keep / p.name).write_bytes(p.read_bytes())
    assert parts.joined_bytes(keep / "mog-last.pt.parts.json") == last.read_bytes()
    small = tmp_path / "small"
    small.mkdir()
    limit = last.stat().st_size // MOG_PARTS - 1  # four parts would each hold more
    assert runners.return_mog_checkpoint(last, tmp_path / "work2", small, tmp_path / "keep2", limit) == 0
    assert not list(small.iterdir())


def test_the_next_job_rebuilds_the_carried_mog_run_from_the_committed_parts(mog_checkpoint, tmp_path):
    """campaigns/mog/last.pt in several committed parts: the job joins them (checked) into its runs folder
    with the run's config and metrics, and resumes from the epoch the checkpoint holds; a damaged part stops
    the campaign with the part named."""
    from swarmctl.errors import DataError
    from tools.campaigns import parts, runners

    root = fresh_campaigns(tmp_path / "campaigns")
    run = root / "mog" / "runs" / "swarm-mog-4"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_bytes((mog_checkpoint / "metrics.jsonl").read_bytes())
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "last.pt").write_bytes((mog_checkpoint / "last.pt").read_bytes())
    size = (mog_checkpoint / "last.pt").stat().st_size
    assert len(parts.split(tmp_path / "src" / "last.pt", root / "mog", size // 3 + 1).parts) == 3
    carried = runners.restore_mog(root, tmp_path / "runs")
    assert carried is not None and (carried.name, carried.epoch, carried.step, carried.code) == \
        ("swarm-mog-4", 2, "eager", "8-2-1")
    rebuilt = tmp_path / "runs" / "swarm-mog-4"
    assert (rebuilt / "last.pt").read_bytes() == (mog_checkpoint / "last.pt").read_bytes()
    assert (rebuilt / "metrics.jsonl").read_bytes() == (mog_checkpoint / "metrics.jsonl").read_bytes()
    assert json.loads((rebuilt / "config.json").read_text())["run"]["name"] == "swarm-mog-4"
    part = root / "mog" / "last.pt.part1"
    data = part.read_bytes()
    part.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(DataError, match="last.pt.part1"):
        runners.restore_mog(root, tmp_path / "runs2")
    assert runners.restore_mog(fresh_campaigns(tmp_path / "fresh"), tmp_path / "runs3") is None


def test_a_bf16_compile_probe_counts_as_amp_compile_only_where_the_task_lists_it(monkeypatch):
    """`--probe image+amp` measures the compiled bf16 step; the choice takes it (as `amp+compile`) only where
    the task lists that mode as proven, and never for the float32 `compile`."""
    from swarmctl.tasks.image import ImageTask

    probe = {"task": "image", "amp": True, "finished": True, "compile_s": 30.0, "warmup_s": 2.0,
             "steady_s_per_epoch": 6.0, "steady_ms_per_step": 5.0}
    timing = {"image_s_per_epoch": {"eager": 30.0}, "compile_probe": probe}
    assert set(measured_modes(timing, "image")) == {"eager"}  # image lists no amp+compile (yet)
    monkeypatch.setattr(ImageTask, "proven_modes", (*ImageTask.proven_modes, "amp+compile"))
    assert measured_modes(timing, "image")["amp+compile"] == Measured(0.005, 32.0)
    assert "compile" not in measured_modes(timing, "image")
    assert choose_flags(timing, True, {"image": 3600}) == {"image": ["--step", "amp+compile"]}
    kept = {"compile_probes": {"image+amp": probe}}  # an earlier job's probe, kept in timing.json
    assert measured_modes(kept, "image")["amp+compile"] == Measured(0.005, 32.0)


def test_a_job_keeps_the_earlier_jobs_compile_probes_beside_its_own():
    """A job probes one compile; committing its timings must not drop the other tasks' probes of the same card
    and torch (nor an older file's own probe), a probe it did not finish (killed by its cap) does not replace a
    finished one, and another card's probes are not kept beside this card's timings."""
    from tools.campaigns.plan import keep_probes

    card = {"device": "H200", "torch": "2.11"}
    old = {"task": "image", "finished": True, "compile_s": 40.0, "steady_s_per_epoch": 15.0, **card}
    older = {"task": "clustering", "finished": True, "compile_s": 16.0, "steady_s_per_epoch": 1.5, **card}
    earlier = {"compile_probe": older,
               "compile_probes": {"image": old, "mog": {"task": "mog", "finished": True, "compile_s": 45.0,
                                                        "steady_ms_per_step": 9.8, **card}}}
    here = {"device": {"name": "H200", "type": "cuda", "torch": "2.11"}}
    new_mog = {"task": "mog", "amp": True, "finished": True, "compile_s": 50.0, "steady_ms_per_step": 5.0, **card}
    got = keep_probes({**here, "mog_ms_per_step": {"eager": 20.0}, "compile_probe": new_mog}, earlier)
    assert set(got["compile_probes"]) == {"image", "mog", "mog+amp", "clustering"}
    assert got["compile_probes"]["mog+amp"] == new_mog
    killed = {"task": "image", "compile_s": ">60", "finished": False, **card}
    got = keep_probes({**here, "compile_probe": killed}, earlier)
    assert got["compile_probes"]["image"] == old and got["compile_probe"] == killed
    assert measured_modes(got, "image")["compile"] == Measured(15.0 / 1200, 40.0)
    elsewhere = keep_probes({"device": {"name": "A100", "torch": "2.11"}, "mog_ms_per_step": {"eager": 40.0}}, earlier)
    assert "compile_probes" not in elsewhere and "compile" not in measured_modes(elsewhere, "mog")
    assert keep_probes({"x": 1}, {}) == {"x": 1}


@pytest.mark.parametrize("bad", [[], "fast", {"mog": "x"}, {"mog": {"task": "mog", "finished": True,
                                                                     "compile_s": "x", "steady_ms_per_step": 3}},
                                 {"mog": {"task": "mog", "finished": True, "compile_s": 5, "warmup_s": "x",
                                          "steady_ms_per_step": 3}}])
def test_a_malformed_kept_probe_is_no_measurement(bad):
    """timing.json is the repository's file, but a hand edit must not crash the job or `campaign status`."""
    from tools.campaigns.plan import keep_probes

    timing = {"mog_ms_per_step": {"eager": 16.0}, "compile_probes": bad}
    modes = measured_modes(timing, "mog")
    assert "eager" in modes and (modes.get("compile") in (None, Measured(3e-3, 5.0)))
    keep_probes({"device": {"name": "c", "torch": "t"}}, timing)

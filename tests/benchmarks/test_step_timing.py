"""benchmarks/gpu/step_timing.py may be killed at any moment inside a rare GPU job: its JSON must then
hold every mode finished before the kill (written atomically after each), never a torn file; CUDA-only
modes are not reported from the CPU; --budget stops it in time; the compile probe records the compile
seconds before it times the steady steps. All on the CPU in smoke size."""

import argparse
import json
import math
import os
import random
import re
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu" / "step_timing.py"
RESULT_KEYS = {"mog": "mog_ms_per_step", "image": "image_s_per_epoch", "clustering": "clustering_s_per_epoch"}
# a line that announces a measured step time (the old script's wording too): printed after its JSON write
MEASURED = re.compile(r"ms/step|\d s per (MNIST )?epoch|epoch\s+[\d.]+ s")


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import step_timing
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return step_timing


def _run_in_process(*args) -> int:
    """The script as `python step_timing.py ARGS` would run it, in this process (no second torch import)."""
    argv = sys.argv
    sys.argv = [str(SCRIPT), *map(str, args)]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    except SystemExit as exc:
        return exc.code or 0
    finally:
        sys.argv = argv
    return 0


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "SWARMCTL_NO_EXT": "1",
            "OMP_NUM_THREADS": "1"}


def _check_document(doc: dict, cpu: bool = True) -> int:
    """Every mode listed is complete: a finite number with its warm-up seconds; no CUDA-only mode holds a
    CPU number. Returns how many modes it holds."""
    n = 0
    for part, key in RESULT_KEYS.items():
        for mode, value in doc[key].items():
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, mode, value)
            assert isinstance(doc["warmup_s"][f"{part}/{mode}"], float), (part, mode)
            if cpu:
                assert not {"graphs", "tf32", "triton"} & set(re.split(r"[+-]", mode)), f"{part}/{mode} on the CPU"
            n += 1
    for name, losses in doc["loss"].items():
        assert losses and all(isinstance(v, float) and math.isfinite(v) for v in losses.values()), name
    assert all(isinstance(v, str) for v in (*doc["not_measured"].values(), *doc["failed"].values()))
    return n


def test_a_smoke_run_writes_every_key_and_no_cuda_mode_on_the_cpu(tiny_h5, tmp_path):
    out = tmp_path / "timing.json"
    out.write_text(json.dumps({"compile_probe": {"task": "mog", "compile_s": 1.5},  # another invocation's key
                               "mog_ms_per_step": {"stale": 1.0}}))
    t = time.perf_counter()
    assert _run_in_process(tiny_h5, "--smoke", "--device", "cpu", "--json", out) == 0
    print(f"smoke run in process: {time.perf_counter() - t:.1f} s")
    doc = json.loads(out.read_text())
    for key in ("clustering_s_per_epoch", "mog_ms_per_step", "image_s_per_epoch", "loss", "device", "failed",
                "warmup_s", "not_measured", "complete"):
        assert key in doc, key
    assert doc["complete"] is True and doc["failed"] == {} and doc["device"]["name"] == "cpu"
    assert _check_document(doc) >= 4
    assert set(doc["mog_ms_per_step"]) == {"eager", "bf16-autocast"}  # the stale mode of the earlier file is gone
    assert {"fp32", "bf16-autocast"} <= set(doc["clustering_s_per_epoch"])
    assert {"eager", "bf16-autocast"} <= set(doc["image_s_per_epoch"])
    for key in ("mog/graphs", "image/graphs", "image/graphs+bf16", "clustering/tf32+graphs", "clustering/tf32",
                "mog/graphs+bf16", "mog/triton", "mog/triton+bf16", "mog/triton+graphs", "mog/triton+graphs+bf16",
                "image/triton", "image/triton+bf16", "image/triton+graphs+bf16",
                "clustering/tf32+triton", "clustering/bf16+triton", "clustering/tf32+triton+graphs"):
        assert "CUDA" in doc["not_measured"][key], key  # listed as not measured, never as a number
    assert set(doc["loss"]) == {"mog_same_weights", "image_same_weights", "clustering_val_same_weights"}
    assert set(doc["loss"]["mog_same_weights"]) == {"fp32", "bf16-autocast"}  # tf32 and Triton: CUDA only
    assert doc["compile_probe"] == {"task": "mog", "compile_s": 1.5}  # kept: not this invocation's
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_json_is_replaced_atomically_or_not_at_all(tmp_path, monkeypatch):
    st = _module()
    path = tmp_path / "t.json"
    st.write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and oct(path.stat().st_mode & 0o777) == "0o644"
    for broken in ("fsync", "replace"):
        with monkeypatch.context() as m:
            m.setattr(st.os, broken, lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
            with pytest.raises(OSError):
                st.write_json_atomic(path, {"a": 2, "long": "x" * 100_000})
        assert json.loads(path.read_text()) == {"a": 1}, broken  # the old content, whole
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"], broken  # no temporary file left


def test_a_killed_writers_temporary_files_are_removed_by_the_next_one(tmp_path):
    st = _module()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f".t.json.{dead.pid}.abc.tmp"
    live = tmp_path / f".t.json.{os.getppid()}.abc.tmp"  # a running writer's file stays
    other = tmp_path / f".u.json.{dead.pid}.abc.tmp"  # another file's
    for p in (orphan, live, other):
        p.write_text("{")
    assert st.remove_orphan_temps(tmp_path / "t.json") == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_the_budget_starts_no_mode_it_cannot_hold(tmp_path):
    st = _module()
    budget = st.Budget(5.0)
    report = st.Report(tmp_path / "b.json", st.TIMING_KEYS)
    report.data.update(mog_ms_per_step={}, warmup_s={}, not_measured={}, failed={})
    timing = st.Timing(argparse.Namespace(smoke=True), torch.device("cpu"), report, budget)
    called = []

    def measure():
        called.append(1)
        return timing._result("mog", "eager", 1.0, 0.5), "mog/eager: 1 ms/step"

    budget.costs["mog"] = [30.0]  # a mode of this part took 30 s: 5 s cannot hold another
    timing.unit("mog", "eager", measure)
    assert called == [] and report.data["not_measured"]["mog/eager"].startswith("budget")
    budget.costs["mog"] = [1.0]
    timing.unit("mog", "eager", measure)
    assert called == [1] and json.loads((tmp_path / "b.json").read_text())["mog_ms_per_step"] == {"eager": 1.0}

    def too_long():
        return st.timed(lambda b: time.sleep(0.01), range(10_000), torch.device("cpu"), budget)

    budget.costs.clear()  # nothing measured: the mode is started
    budget.end = time.monotonic() + 0.05  # and stopped inside when it runs past the budget
    t = time.monotonic()
    timing.unit("mog", "graphs", too_long)
    assert time.monotonic() - t < 1 and "ran out" in report.data["not_measured"]["mog/graphs"]


def test_a_failing_triton_cell_fails_only_its_own_mog_loss_numerics(tmp_path, monkeypatch):
    """The MoG same-weights losses are a unit of their own: a Triton cell that cannot run (as on a card whose
    Triton fails) is listed under "failed" per numeric, and the float32, TF32 and bf16 losses still come."""
    import contextlib

    st = _module()
    report = st.Report(tmp_path / "l.json", st.TIMING_KEYS)
    report.data.update(loss={}, warmup_s={}, not_measured={}, failed={})
    timing = st.Timing(argparse.Namespace(smoke=True), torch.device("cpu"), report, st.Budget(None))
    timing.cuda = True  # as on a card: the TF32 and Triton numerics are asked for

    @contextlib.contextmanager
    def broken(enabled=True):
        if enabled:
            raise ImportError("no triton here")
        yield

    monkeypatch.setattr(st, "triton_cell", broken)
    monkeypatch.setattr(st, "use_tf32", lambda on: None)
    timing.unit("mog", "loss", lambda: timing._mog_loss(timing.sizes.mog_batches(timing.device)))
    doc = json.loads((tmp_path / "l.json").read_text())
    assert set(doc["loss"]["mog_same_weights"]) == {"fp32", "tf32", "bf16-autocast"}
    assert set(doc["failed"]) == {"mog/loss/tf32+triton", "mog/loss/bf16+triton"}


def test_a_spent_budget_ends_the_run_at_once_with_what_it_has(tiny_h5, tmp_path):
    out = tmp_path / "timing.json"
    t = time.perf_counter()
    assert _run_in_process(tiny_h5, "--smoke", "--device", "cpu", "--json", out, "--budget", "0.001") == 0
    assert time.perf_counter() - t < 5
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and _check_document(doc) == 0
    assert all(w.startswith("budget") for k, w in doc["not_measured"].items() if "CUDA" not in w)
    assert "budget" in doc["not_measured"]["mog/eager"] and "budget" in doc["not_measured"]["clustering/loss"]


class _Child:
    """A running script whose output lines are collected (with their count at any moment)."""

    def __init__(self, args, env=None) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env or _env(), cwd=REPO)
        self.lines: list[str] = []
        self.started, self.first_measured = time.monotonic(), None  # seconds from the start to the first mode
        self.seen = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.seen:
                self.lines.append(line)
                if self.first_measured is None and MEASURED.search(line):
                    self.first_measured = time.monotonic() - self.started
                self.seen.notify_all()

    def measured(self) -> int:
        with self.seen:
            return sum(bool(MEASURED.search(line)) for line in self.lines)

    def wait_for(self, predicate, timeout: float = 60) -> bool:
        with self.seen:
            return self.seen.wait_for(lambda: predicate() or self.proc.poll() is not None, timeout)

    def finish(self, timeout: float = 60) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        self.proc.stdout.close()
        return rc


@pytest.mark.slow
def test_a_kill_at_any_moment_leaves_no_json_or_a_valid_one_with_every_finished_mode(tiny_h5, tmp_path):
    """SIGKILL and SIGTERM at seeded random moments: at a random time, a random delay after the k-th mode
    was announced, or inside the next write (slowed down by STEP_TIMING_WRITE_PAUSE): PATH is absent only
    when no mode had been announced; else it parses and holds every announced mode, complete; no
    temporary file is left under any name a reader would open (after SIGTERM: none at all)."""
    env = {**_env(), "STEP_TIMING_WRITE_PAUSE": "0.25"}
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    t = time.monotonic()
    ref = _Child([tiny_h5, "--smoke", "--device", "cpu", "--json", ref_dir / "t.json"], env)
    assert ref.finish() == 0, "".join(ref.lines)
    duration, n_modes = time.monotonic() - t, ref.measured()
    doc = json.loads((ref_dir / "t.json").read_text())
    assert doc["complete"] and _check_document(doc) == n_modes >= 4, "".join(ref.lines)

    rng = random.Random(20261126)
    outcomes = []
    for sig in (signal.SIGKILL, signal.SIGTERM):
        moments = [("after", rng.randint(1, n_modes - 1), rng.uniform(0, 0.3)) for _ in range(2)]
        moments += [("in-write", rng.randint(1, n_modes - 1), 0.0) for _ in range(2)]
        # at a random time: once well before the reference run's first mode (half its time: a faster start
        # still comes after it), once after it
        moments += [("at", 0, rng.uniform(0.2, max(0.2, ref.first_measured / 2))),
                    ("at", 0, rng.uniform(ref.first_measured, duration))]
        for i, (how, k, delay) in enumerate(moments):
            folder = tmp_path / f"{sig.name}-{i}"
            folder.mkdir()
            child = _Child([tiny_h5, "--smoke", "--device", "cpu", "--json", folder / "t.json"], env)
            if how != "at":
                child.wait_for(lambda c=child, k=k: c.measured() >= k)
            if how == "in-write":  # the next write's temporary file is there: the kill lands inside the write
                until = time.monotonic() + 10
                while not any(folder.glob(".t.json.*.tmp")) and child.proc.poll() is None and time.monotonic() < until:
                    time.sleep(0.002)
            time.sleep(delay)
            announced = child.measured()  # counted before the signal: each was written before its line
            child.proc.send_signal(sig)
            rc = child.finish(timeout=30)
            outcomes.append((sig.name, how, k, round(delay, 2), announced, rc))
            where = f"{sig.name} {how} {k} +{delay:.2f} s (rc {rc}):\n" + "".join(child.lines)
            path = folder / "t.json"
            if not path.exists():
                assert announced == 0, where
            else:
                got = _check_document(json.loads(path.read_text()))
                assert got >= announced, where
            left = sorted(p.name for p in folder.iterdir() if p.name != "t.json")
            if sig == signal.SIGTERM:
                assert rc in (143, -signal.SIGTERM, 0), where  # -15: before the script took the signal over
                assert left == [], where
            else:
                assert all(re.fullmatch(r"\.t\.json\.\d+\.\w+\.tmp", n) for n in left), (left, where)
                if how == "in-write":
                    assert left, where  # it was killed inside a write: the file at PATH was still whole
    print(f"reference run {duration:.1f} s, {n_modes} modes; kills: {outcomes}")
    assert any(o[4] > 0 for o in outcomes) and any(o[4] == 0 for o in outcomes)  # both kinds of moment met


def _probe_with_spy(args) -> tuple[int, list[dict], str]:
    """The probe in a fresh process (a cold compiler) whose every JSON write is recorded."""
    code = (f"import json, sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import step_timing as st\n"
            "docs = []\nreal = st.write_json_atomic\n"
            "def spy(path, data):\n    docs.append(json.loads(json.dumps(data)))\n    real(path, data)\n"
            f"st.write_json_atomic = spy\nrc = st.main({[str(a) for a in args]!r})\n"
            "print('WRITES ' + json.dumps(docs))\nsys.exit(rc)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO,
                         timeout=600)
    writes = [json.loads(line[7:]) for line in res.stdout.splitlines() if line.startswith("WRITES ")]
    return res.returncode, writes[0] if writes else [], res.stdout[-3000:] + res.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("task,amp", [("clustering", False), ("image", False), ("image", True)])
def test_the_compile_probe_writes_the_compile_seconds_before_timing_the_steady_steps(task, amp, tiny_h5, tmp_path):
    out = tmp_path / "probe.json"
    out.write_text(json.dumps({"mog_ms_per_step": {"eager": 2.0}}))  # a timing run's file: kept
    t = time.perf_counter()
    rc, writes, log = _probe_with_spy([tiny_h5, "--smoke", "--device", "cpu", "--compile-probe", task, "--json", out,
                                       *["--amp"] * amp])
    print(f"compile probe {task}: {time.perf_counter() - t:.1f} s")
    assert rc == 0, log
    probes = [w["compile_probe"] for w in writes]
    first = next(i for i, p in enumerate(probes) if "compile_s" in p)
    steady = "steady_s_per_epoch"
    assert probes[first]["finished"] is False and steady not in probes[first], probes
    assert probes[first]["compile_s"] > 0 and probes[first]["cold_cache"] is True
    assert all("compile_s" not in p for p in probes[:first])
    final = json.loads(out.read_text())
    assert final["mog_ms_per_step"] == {"eager": 2.0}
    probe = final["compile_probe"]
    assert probe["task"] == task and probe["finished"] is True and probe[steady] > 0 and probe == probes[-1]
    assert probe["amp"] is amp and ("bf16 autocast" in log) is amp
    assert not Path(probe["cache_dir"]).exists()  # the fresh cache folder is removed


@pytest.mark.slow
def test_a_probe_killed_after_the_compile_keeps_its_compile_seconds(tiny_h5, tmp_path):
    out, cache = tmp_path / "probe.json", tmp_path / "cache"  # a cache folder of its own: a kill leaves it
    child = _Child([tiny_h5, "--smoke", "--device", "cpu", "--compile-probe", "mog", "--json", out,
                    "--compile-cache", cache])
    child.wait_for(lambda: any("compile_s" in line for line in child.lines), timeout=300)
    child.proc.send_signal(signal.SIGKILL)
    child.finish()
    probe = json.loads(out.read_text())["compile_probe"]
    assert probe["task"] == "mog" and probe["compile_s"] > 0, "".join(child.lines)
    assert probe["cold_cache"] is True and probe["cache_dir"] == str(cache) and any(cache.iterdir())
    if probe["finished"]:  # it may have ended meanwhile
        assert probe["steady_ms_per_step"] > 0
    else:
        assert "steady_ms_per_step" not in probe

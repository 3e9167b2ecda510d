"""Table 2 on a CPU (`python -m tools.campaigns run OUT --device cpu`): the six configurations of
sweeps/best.toml x seeds 0, 1, 2, trained one after another on ``threads`` threads of this machine, each for
the paper's protocol of 60 net minutes, and continued where the last job stopped.

Everything lives in ``campaigns/clustering-cpu/`` (committed after each job): ``progress.json`` (the finished
runs' evaluations, every job that moved the table), ``cost.json`` (benchmarks/table2_cpu_cost.py: seconds per
epoch of each configuration on this CPU) and ``runs/NAME/``: a run in progress keeps its ``last.pt`` and
``best.pt`` (model and Adam state, so the next job resumes it bit for bit); a finished one keeps its config,
metrics, evaluation, curves, and its ``last.pt`` and ``best.pt`` without the optimizer's state (a third of the
size: what `swarmctl eval` and `report` read).

The rows run cheapest first (by the measured cost, else by parameters), all three seeds of a row before the
next row, so that the table fills row by row. The plan (:func:`cpu_plan`) gives each row's CPU hours for three
seeds at the protocol, and to a flat validation curve once a seed of the row has finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import signal
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from swarmctl.config import TrainConfig
from swarmctl.devices import cpu_model
from swarmctl.errors import CheckpointError, ConfigError, DataError, ResourceError
from swarmctl.files import atomic_write_text, read_metrics
from swarmctl.rundir import RunDir
from swarmctl.runs import parameter_count, run_lock, run_progress
from swarmctl.runs.shipped import shipped_models
from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint
from tools.campaigns import processes
from tools.campaigns.plan import PROGRESS, table_runs
from tools.campaigns.plan import read_progress as campaign_progress
from tools.campaigns.processes import STOPPING, Deadline, finish, log, start, stop_on_signals, summary, warn
from tools.campaigns.runners import eval_file, read_json, write_json

CPU = "clustering-cpu"  # the campaign's folder in campaigns/
# the CPU job builds and runs the fused CPU kernels, as `swarmctl train` does on a CPU (the GPU jobs switch them off)
KERNELS = {"SWARMCTL_NO_EXT": "0"}
COST = "cost.json"  # benchmarks/table2_cpu_cost.py's measurement, in that folder
MINUTES = 60.0  # the paper's protocol: 60 net minutes a run
SEEDS = 3
FLAT = 0.01  # a curve is flat from the first epoch whose best loss is within 1 % of the run's final best
SEED0 = "clustering-seed0.h5"  # the table's data, as `swarmctl gen-data --seed 0` names it
EVAL_RESERVE = 120.0  # seconds a job keeps after a training for its evaluation on the validation split
MIN_TRAIN_S = 60.0  # the least time a job starts another run for
POLL_S = 1.0  # how often the job looks at its running commands
SYS_CPU = Path("/sys/devices/system/cpu")  # Linux: cpuN/topology/thread_siblings_list, the CPUs of N's core


def cpu_machine() -> str:
    """This machine as the records name it: its processor model and cores."""
    return f"{cpu_model()}, {os.cpu_count()} cores"


def read_cost(root: Path) -> dict[tuple[str, str], dict[int, float]]:
    """Seconds per epoch (training steps only) by (model, code) and threads, from cost.json; empty without it.
    On one thread the CPU seconds are read (they hold on a shared machine); on more, the wall seconds."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    rows = read_json(root / CPU / COST).get("rows", [])
    for row in rows if isinstance(rows, list) else []:  # a row or timing not in the benchmark's shape: not measured
        if not (isinstance(row, dict) and isinstance(row.get("timings"), list)):
            continue
        for t in row["timings"]:
            threads = _count(t.get("threads")) if isinstance(t, dict) else None
            if threads is None or threads < 1:
                continue
            value = t.get("cpu_s_per_epoch") if threads == 1 else t.get("s_per_epoch")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf"):
                out.setdefault((str(row.get("model")), str(row.get("code"))), {})[threads] = float(value)
    return out


def cpu_runs(root: Path) -> list[dict]:
    """Every run of the table, row by row (cheapest row first), seeds 0, 1, 2 within a row."""
    runs = table_runs()
    cost = read_cost(root)
    params = {r["code"] + r["model"]: parameter_count(r["config"]) for r in runs if r["seed"] == 0}

    def price(r: dict) -> tuple[float, int]:
        per_epoch = cost.get((r["model"], r["code"]), {}).get(1)
        return (per_epoch if per_epoch is not None else float("inf"), params[r["code"] + r["model"]])

    return sorted(runs, key=lambda r: (*price(r), r["model"], r["seed"]))


# ---- the plan ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuRow:
    """One configuration of the table on this CPU: what a run costs, what is done, the hours still needed."""

    model: str
    code: str
    epoch_s: dict[int, float]  # measured seconds per epoch by threads (training steps only)
    epochs_per_run: float | None  # epochs 60 net minutes buy on one thread
    done: int  # finished seeds
    losses: tuple[float, ...]  # their validation losses
    epochs: tuple[int, ...]  # their epochs
    hours_protocol: float  # CPU hours (one core) for the seeds left at 60 net minutes each, evaluation included
    flat_minutes: float | None  # net minutes to a flat validation curve (the finished seeds' median)
    hours_flat: float | None  # CPU hours for three seeds trained to that point (None: not flat within the runs)
    note: str
    in_progress: str | None = None  # the run a job stopped in this row: its epochs and best loss so far
    hours_seeds: float = 0.0  # CPU hours for all three seeds at 60 net minutes each, evaluation included
    hours_flat_more: float | None = None  # a flat curve needs more than these CPU hours for three seeds


def _in_progress(runs_dir: Path, runs: list[dict], finished: dict) -> str | None:
    for r in runs:
        path = RunDir(runs_dir / r["name"]).metrics
        rows = read_metrics(path) if r["name"] not in finished and path.is_file() else []
        if rows:
            return (f"{r['name']} at {len(rows)} epochs, {rows[-1]['net_seconds'] / 60:.1f} net min, best val loss "
                    f"{rows[-1]['best_val']:.4f}")
    return None


def _flat_minutes(run_dir: Path) -> float | None:
    """Net minutes at the first epoch whose best validation loss is within FLAT of the run's final best."""
    path = RunDir(run_dir).metrics
    rows = read_metrics(path) if path.is_file() else []
    best = [r for r in rows if isinstance(r.get("best_val"), (int, float))]
    if not best:
        return None
    final = best[-1]["best_val"]
    first = next(r for r in best if r["best_val"] <= final * (1 + FLAT))
    return first["net_seconds"] / 60


def _count(value) -> int | None:
    """A record's count (an int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shipped_curve(model: str, code: str) -> tuple[int, int, str] | None:
    """(epochs, best epoch, hardware) of a shipped model of this configuration trained on the seed-0 data with the
    CPU table's batch size (train's default); else None. A record whose epochs, best epoch (counted from 0, so
    below its epochs) or training config are missing or malformed holds no curve."""
    for m in shipped_models():
        rec = m.record
        cfg = rec.get("config") if isinstance(rec.get("config"), dict) else {}
        train, data = (cfg.get(k) if isinstance(cfg.get(k), dict) else {} for k in ("train", "data"))
        epochs, best, path = _count(rec.get("epochs")), _count(rec.get("best_epoch")), data.get("path")
        card = rec.get("trained_on")
        if (rec.get("model"), rec.get("code")) == (model, code) and epochs is not None and best is not None \
                and 0 <= best < epochs and train.get("batch_size") == TrainConfig().batch_size \
                and isinstance(path, str) and Path(path).name == SEED0:
            return epochs, best, card.split(" (")[0] if isinstance(card, str) and card.strip() else "a GPU"
    return None


def _eval_share(run_dir: Path) -> float:
    """Wall seconds of evaluation and checkpoints per net second of a run (0.05 before any run is measured)."""
    path = RunDir(run_dir).metrics
    rows = read_metrics(path) if path.is_file() else []
    if not rows or not rows[-1].get("net_seconds"):
        return 0.05
    return rows[-1].get("eval_seconds", 0.0) / rows[-1]["net_seconds"]


def cpu_plan(root: Path) -> tuple[CpuRow, ...]:
    """Each row of the table on this CPU (rows in the order the job runs them)."""
    progress = read_progress(root)
    cost = read_cost(root)
    runs_dir = root / CPU / "runs"
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in cpu_runs(root):
        rows.setdefault((r["model"], r["code"]), []).append(r)
    out = []
    for (model, code), runs in rows.items():
        finished = [progress["runs"][r["name"]] for r in runs if r["name"] in progress["runs"]]
        epoch_s = cost.get((model, code), {})
        per_run = epoch_s.get(1)
        share = statistics.fmean([_eval_share(runs_dir / r["name"]) for r in runs]) if finished else 0.05
        left = SEEDS - len(finished)
        flats = [m for m in (_flat_minutes(runs_dir / r["name"]) for r in runs if r["name"] in progress["runs"])
                 if m is not None]
        flat = statistics.median(flats) if flats else None
        improving = flat is not None and flat >= 0.9 * MINUTES
        shipped = _shipped_curve(model, code) if flat is None and per_run else None
        seeds_hours = SEEDS * MINUTES * (1 + share) / 60
        more = seeds_hours if improving else None
        if flat is None and shipped is not None and shipped[1] >= 0.9 * (shipped[0] - 1):
            more = SEEDS * shipped[0] * per_run * (1 + share) / 3600
            note = (f"the shipped model of this configuration ({shipped[2]}, the same data) still improved at epoch "
                    f"{shipped[1]} of its {shipped[0]}: a flat curve needs more than {shipped[0]} epochs")
        elif flat is None:
            note = "to a flat curve: known once a seed has finished"
        elif improving:  # not flat within the runs: the protocol's hours are a lower bound, no estimate
            note = f"still improving near the end of its {MINUTES:g} net minutes: a flat curve needs more"
        else:
            note = f"flat after {flat:.0f} of its {MINUTES:g} net minutes"
        out.append(CpuRow(model, code, epoch_s, None if per_run is None else MINUTES * 60 / per_run, len(finished),
                          tuple(f["eval_loss"] for f in finished), tuple(f["epochs"] for f in finished),
                          left * MINUTES * (1 + share) / 60, flat,
                          None if flat is None or improving else SEEDS * flat * (1 + share) / 60, note,
                          _in_progress(runs_dir, runs, progress["runs"]), seeds_hours, more))
    return tuple(out)


# ---- the job ---------------------------------------------------------------------------------------------------

def read_progress(root: Path) -> dict:
    """campaigns/clustering-cpu/progress.json as the campaigns read theirs (a damaged one is refused, never
    overwritten), with the CPU table's fields."""
    p = campaign_progress(root, CPU)
    p.setdefault("minutes_per_run", MINUTES)
    p.setdefault("runs", {})
    if not (isinstance(p["runs"], dict) and all(
            isinstance(r, dict) and isinstance(r.get("eval_loss"), (int, float)) and _count(r.get("epochs")) is not None
            for r in p["runs"].values())):
        path = root / CPU / PROGRESS
        raise DataError(f"{path} is damaged (a finished run without its validation loss and epochs); restore it "
                        f"(git checkout {path}) first")
    return p


def _train_args(r: dict, runs: Path, data: Path, minutes: float) -> list[str]:
    """`swarmctl train` for run ``r``: resumed where its folder exists (a run stopped before its first checkpoint
    starts again), else started."""
    if run_progress(runs / r["name"]).status != "new":
        return ["train", r["model"], "--resume", str(runs / r["name"]), "--minutes", f"{minutes:g}", "--device", "cpu"]
    return ["train", r["model"], *r["options"], "--seed", str(r["seed"]), "--minutes", f"{minutes:g}",
            "--device", "cpu", "--data", str(data), "--runs-dir", str(runs), "--name", r["name"]]


def _finish_run(r: dict, run_dir: Path, threads: int, side_by_side: int = 1) -> dict:
    """The record of a finished and evaluated run; its checkpoints give way to its best weights."""
    run = RunDir(run_dir)
    res = read_json(run_dir / eval_file("val"))
    rows = read_metrics(run.metrics)
    with run_lock(run_dir):  # the run's one writer, as a training is
        config = read_json(run.config)
        if config and not config.get("run", {}).get("hardware"):  # a run started before training recorded it
            config["run"]["hardware"] = [hardware(threads)]
            atomic_write_text(run.config, json.dumps(config, indent=2) + "\n")
        for path in (run.last, run.best):  # weights only: a finished run is read (eval, report), not continued
            ckpt = load_checkpoint(path)
            save_checkpoint(path, dataclasses.replace(ckpt, optimizer=None))
    return {"model": r["model"], "code": r["code"], "seed": r["seed"], "eval_loss": res["loss"],
            "accuracy": res.get("accuracy"), "oracle_loss": res.get("oracle_loss"), "epochs": len(rows),
            "net_minutes": round(rows[-1]["net_seconds"] / 60, 2) if rows else 0.0,
            "hardware": f"{cpu_machine()}, {threads} thread{'s' if threads > 1 else ''}",
            "side_by_side": side_by_side,
            "date": datetime.date.today().isoformat()}


def hardware(threads: int) -> str:
    """A CPU run's hardware as training records it (``run.hardware`` in its config.json)."""
    return f"cpu, {threads} thread{'s' if threads > 1 else ''}"


def check_cpu_job(root: Path, data: Path) -> None:
    """What the CPU job needs before it starts: the campaigns folder and the seed-0 data (one line each)."""
    if not root.is_dir():
        raise ResourceError(f"{root} is not a folder; run from the repository's root or pass `campaigns`")
    if not Path(data).is_file():
        raise DataError(f"{data} does not exist; create the paper's data with `swarmctl gen-data --seed 0` or "
                        "pass `clustering-data`")


@dataclass
class _Slot:
    """Where one run at a time trains and is evaluated: its CPUs (None: not held to any), the run in it, the
    command running for it and until when (monotonic seconds) it may run."""

    cpus: frozenset[int] | None
    run: dict | None = None
    proc: object = None  # subprocess.Popen, or None for a command not started (a signal came first)
    evaluating: bool = False
    until: float = 0.0
    before: int = 0  # the run's epochs when this job took it
    termed: bool = False  # the command got SIGTERM for running past ``until`` (which then is its SIGKILL time)

    def begin(self, proc: object, until: float) -> None:
        """``proc`` (None: not started) runs in this slot until ``until``."""
        self.proc, self.until, self.termed = proc, until, False


def _siblings(cpu: int) -> set[int]:
    """The CPUs of ``cpu``'s core (its hardware threads); just itself where the system does not say."""
    try:
        text = (SYS_CPU / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()
        out: set[int] = set()
        for part in text.strip().split(","):
            low, _, high = part.partition("-")
            out.update(range(int(low), int(high or low) + 1))
    except (OSError, ValueError):
        return {cpu}
    return out if cpu in out else {cpu}


def cpu_slots(parallel: int, threads: int) -> list[frozenset[int] | None]:
    """The CPUs each of ``parallel`` runs side by side is held to: disjoint sets of ``threads`` of the CPUs this
    process may use, one CPU of each core (never two threads of one core), so that no two runs share a core; one
    run at a time is held to none."""
    if parallel == 1:
        return [None]
    pinning = hasattr(os, "sched_getaffinity")  # not on every system (macOS): there the runs are not held
    allowed = sorted(os.sched_getaffinity(0)) if pinning else list(range(os.cpu_count() or 1))
    cpus = [c for c in allowed if min(_siblings(c) & set(allowed)) == c]  # the first CPU of each core
    if parallel * threads > len(cpus):
        shared = f" (its {len(allowed)} CPUs are threads of {len(cpus)} cores)" if len(cpus) < len(allowed) else ""
        raise ConfigError(f"`--parallel {parallel}` runs of `--threads {threads}` need {parallel * threads} cores and "
                          f"this process may use {len(cpus)}{shared}; lower --parallel or --threads")
    return [frozenset(cpus[i * threads:(i + 1) * threads]) if pinning else None for i in range(parallel)]


def _ended(busy: list[_Slot]) -> list[tuple[_Slot, int | None]]:
    """The slots whose command ended, waiting for the first. Every command past its time gets SIGTERM at once (a
    trainer then saves its last.pt, in every slot side by side) and SIGKILL GRACE_S seconds later. A signal to the
    job has sent each command SIGTERM already: each is then waited for within its time, never killed sooner."""
    while True:
        now = time.monotonic()
        for s in busy:
            if s.proc is None or s.proc.poll() is not None or now < s.until:
                continue
            if s.termed:
                log(f"pid {s.proc.pid}: still running {processes.GRACE_S:g} s after SIGTERM, SIGKILL")
                s.proc.kill()
                s.proc.wait()
            else:
                log(f"pid {s.proc.pid}: out of time, SIGTERM")
                s.proc.send_signal(signal.SIGTERM)
                s.termed, s.until = True, now + processes.GRACE_S
        ended = [(s, finish(s.proc, 1.0)) for s in busy if s.proc is None or s.proc.poll() is not None]
        if ended:
            return ended
        time.sleep(POLL_S)


def _stop(slots: list[_Slot]) -> None:
    """Every command still running in ``slots`` stopped the graceful way: SIGTERM now, SIGKILL GRACE_S s later."""
    busy = [s for s in slots if s.proc is not None]
    for s in busy:
        s.until = s.until if s.termed else min(s.until, time.monotonic())
    while busy:
        for s, _ in _ended(busy):
            busy.remove(s)


def run_cpu_job(root: Path, out: Path, wall: float, threads: int, data: Path, minutes: float = MINUTES,
                parallel: int = 1) -> int:
    """Train the table's runs in plan order, ``parallel`` at a time (each on cores of its own), until ``wall``
    seconds are spent or every run is done; 0 when the job ended by itself, 130 when a signal stopped it (each
    run in progress saved, to resume next job). One job at a time writes the table."""
    slots = [_Slot(cpus) for cpus in cpu_slots(parallel, threads)]
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(run_lock(root / CPU))
        except CheckpointError:
            holder = RunDir(root / CPU).lock.read_text(errors="replace").strip() or "another process"
            raise ResourceError(f"another CPU job (process {holder}) is training {root / CPU}; wait for it to end "
                                f"or stop it (kill {holder}) first") from None
        try:
            return _cpu_job(root, out, wall, threads, data, minutes, slots)
        except BaseException:
            _stop(slots)  # a run training in another slot saves its last.pt instead of training on unattended
            raise


def _cpu_job(root: Path, out: Path, wall: float, threads: int, data: Path, minutes: float, slots: list[_Slot]) -> int:
    stop_on_signals()
    deadline, t0 = Deadline(wall), time.monotonic()
    progress = read_progress(root)
    runs, logs = root / CPU / "runs", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    moved: list[dict] = []
    todo = [r for r in cpu_runs(root) if r["name"] not in progress["runs"]]
    # a run an earlier job stopped goes first, whatever the order (a cost measured since may have changed it)
    todo.sort(key=lambda r: run_progress(runs / r["name"]).status == "new")
    halted = False  # a run failed: no other starts (those running finish)
    while True:
        for slot in slots:
            if slot.run is not None or not todo or halted or STOPPING:
                continue
            if deadline.left() < EVAL_RESERVE + MIN_TRAIN_S:
                log(f"cpu table: {deadline.left():.0f} s left, too few for another run")
                todo.clear()
                break
            r = todo.pop(0)
            slot.run, slot.evaluating, slot.before = r, False, summary(runs / r["name"])["epochs"]
            slot.begin(start(["--threads", str(threads), *_train_args(r, runs, data, minutes)],
                             logs / f"train-{r['name']}.txt", KERNELS, slot.cpus),
                       time.monotonic() + deadline.left() - EVAL_RESERVE)
        busy = [s for s in slots if s.run is not None]
        if not busy:
            break
        for slot, code in _ended(busy):
            r, run_dir = slot.run, runs / slot.run["name"]
            if not slot.evaluating:
                moved.append({"run": r["name"], "epochs": [slot.before, summary(run_dir)["epochs"]],
                              "train_exit": code})
                if code == 0:
                    slot.evaluating = True
                    slot.begin(start(["--threads", str(threads), "eval", str(run_dir), "--device", "cpu", "--force"],
                                     logs / f"eval-{r['name']}.txt", KERNELS, slot.cpus),
                               time.monotonic() + max(deadline.left(), 30))
                    continue
                warn(f"cpu table: {r['name']} stopped (train exit {code}); the next job resumes it")
                halted = True
            elif code != 0 or "loss" not in read_json(run_dir / eval_file("val")):
                warn(f"cpu table: {r['name']} trained but its evaluation failed (exit {code}); the next job "
                     "evaluates it")
                halted = True
            else:
                progress["runs"][r["name"]] = _finish_run(r, run_dir, threads, len(slots))
                log(f"cpu table: {r['name']} done, val loss {progress['runs'][r['name']]['eval_loss']:.4f}")
                write_json(root / CPU / PROGRESS, progress)
            slot.run, slot.proc = None, None
    if moved:
        progress["sessions"].append({"date": datetime.date.today().isoformat(), "machine": cpu_machine(),
                                     "threads": threads, "parallel": len(slots), "wall_s": round(time.monotonic() - t0),
                                     "runs": moved})
        write_json(root / CPU / PROGRESS, progress)
    write_json(out / "session.json", {"device": "cpu", "machine": cpu_machine(), "threads": threads,
                                      "parallel": len(slots), "wall_s": round(time.monotonic() - t0), "runs": moved,
                                      "stopped_by": STOPPING[0] if STOPPING else None})
    return 130 if STOPPING else 0

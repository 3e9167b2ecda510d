"""Commands on a shared machine: the thread rule of swarmctl/threads.py beside other processes.

    python benchmarks/shared_machine.py [commands] [--repeat 3] [--out DIR]
    python benchmarks/shared_machine.py after-job --data FILE [--minutes 1.5] [--repeat 2] [--out DIR]
    python benchmarks/shared_machine.py reaction [--seconds 10]

``commands``: each command alone, then beside one busy process, with the rule and with every core's thread
(PyTorch's own default). Target: beside one busy process, each command at most 3x its idle time (two
threads beside it on two cores thrashed: 0.79 s a step against 54 ms with one).

``after-job``: the same short train (SWARM 64-5-1 on FILE, ``--minutes`` net) started on a quiet machine and
started right after a job that kept every usable core busy for 65 s ends, when the one-minute load average
is still near the core count, and, for comparison, that run on one thread (what the load-average rule
chose then). Target: the run after the job trains as many epochs as the quiet one, within the noise of
the repeats. Run it on an otherwise quiet machine.

``reaction``: what the rule sees while a one-core busy process runs and after it ends, every quarter of a
second: the one-minute load average and the count the load rule gave, against the cores busy elsewhere
over the window and the count the rule gives now.

Each prints one markdown table. The busy processes are plain Python loops (one core each).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLEAN = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "SWARMCTL_THREADS", "_SWARMCTL_THREADS_CHOSEN")


def commands(work: Path) -> dict[str, list[str]]:
    """The commands timed: each a few seconds alone on two cores, using the shipped models."""
    return {
        "sample --dataset mnist (20 images)": ["sample", "--dataset", "mnist", "--out", str(work / "s.png"),
                                               "--runs-dir", str(work / "runs")],
        "train swarm-mog 64-5-1, 20 steps": ["train", "swarm-mog", "--hidden", "64", "--iters", "5",
                                             "--steps-per-epoch", "20", "--val-batches", "2", "--max-epochs", "1",
                                             "--runs-dir", str(work / "runs"), "--device", "cpu"],
        "cluster docs/iris.csv": ["cluster", str(REPO / "docs" / "iris.csv"), "--columns", "2,3",
                                  "--out", str(work / "c.csv"), "--runs-dir", str(work / "runs")],
    }


def timed(args: list[str], threads: str | None, work: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    if threads is not None:
        env["SWARMCTL_THREADS"] = threads
    for stale in (work / "runs", work / "s.png", work / "s.npy", work / "c.csv"):
        subprocess.run(["rm", "-rf", str(stale)], check=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "swarmctl", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return seconds


def busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def commands_table(a: argparse.Namespace, work: Path) -> None:
    cores = str(len(os.sched_getaffinity(0)))
    rows = []
    for label, args in commands(work).items():
        timed(args, None, work)  # warm caches (the fused kernels' build, the page cache)
        found: dict[tuple[str, bool], float] = {}
        for setting, threads in (("rule", None), ("all cores", cores)):
            found[setting, False] = statistics.median(timed(args, threads, work) for _ in range(a.repeat))
            hog = busy()
            try:
                time.sleep(1)  # the rule measures the cores' time over its start-up: no minute to wait
                found[setting, True] = statistics.median(timed(args, threads, work) for _ in range(a.repeat))
            finally:
                hog.kill()
                hog.wait()
            time.sleep(1)
        rows.append((label, found))
    print(f"{platform.processor() or platform.machine()}, {cores} usable cores, python {platform.python_version()}, "
          f"median of {a.repeat}\n")
    print("| command | rule: idle s | rule: busy s | rule: ratio | all cores: idle s | all cores: busy s | "
          "all cores: ratio |")
    print("|---|---|---|---|---|---|---|")
    for label, f in rows:
        print(f"| {label} | {f['rule', False]:.2f} | {f['rule', True]:.2f} | {f['rule', True] / f['rule', False]:.1f}x"
              f" | {f['all cores', False]:.2f} | {f['all cores', True]:.2f} | "
              f"{f['all cores', True] / f['all cores', False]:.1f}x |")


def train_run(data: Path, minutes: float, work: Path, name: str, threads: str | None) -> tuple[int, int]:
    """One short SWARM 64-5-1 run: (the threads it said it used, the epochs it trained)."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    if threads is not None:
        env["SWARMCTL_THREADS"] = threads
    proc = subprocess.run([sys.executable, "-m", "swarmctl", "train", "swarm", "--hidden", "64", "--iters", "5",
                           "--layers", "1", "--minutes", str(minutes), "--data", str(data), "--device", "cpu",
                           "--runs-dir", str(work / "runs"), "--name", name], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"train {name} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    used = re.search(r"cpu, (\d+) threads?", proc.stdout)
    epochs = re.search(r"(\d+) epochs", proc.stdout)
    if used is None or epochs is None:
        raise SystemExit(f"train {name}: cannot read its threads or epochs from: {proc.stdout[-500:]}")
    return int(used.group(1)), int(epochs.group(1))


def after_job(a: argparse.Namespace, work: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    found: dict[str, list[tuple[int, int]]] = {"quiet machine": [], "right after a job on every core": [],
                                               "right after the job, 1 thread (the load rule's count)": []}
    for r in range(a.repeat):
        for i, (label, threads) in enumerate((("quiet machine", None), ("right after a job on every core", None),
                                              ("right after the job, 1 thread (the load rule's count)", "1"))):
            if label == "quiet machine":
                time.sleep(70)  # the last job's trace gone from the load average as well
            else:
                hogs = [busy() for _ in range(cores)]
                time.sleep(65)
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            load = os.getloadavg()[0]
            found[label].append(train_run(a.data, a.minutes, work, f"r{r}-{i}", threads))
            print(f"{label}: load {load:.2f} at start, {found[label][-1][0]} threads, {found[label][-1][1]} epochs",
                  file=sys.stderr)
    print(f"{platform.processor() or platform.machine()}, {cores} usable cores, SWARM 64-5-1 on {a.data.name}, "
          f"{a.minutes:g} net min, {a.repeat} repeats\n")
    print("| started | threads | epochs (each repeat) | median |")
    print("|---|---|---|---|")
    for label, runs in found.items():
        print(f"| {label} | {', '.join(str(t) for t, _ in runs)} | {', '.join(str(e) for _, e in runs)} | "
              f"{statistics.median(e for _, e in runs):g} |")


def reaction(a: argparse.Namespace) -> None:
    from swarmctl import threads

    cores = threads.usable_cores()
    rows = []
    start = time.monotonic()
    hog = busy()
    try:
        while time.monotonic() - start < a.seconds * 2.5:
            if hog is not None and time.monotonic() - start >= a.seconds:
                hog.kill()
                hog.wait()
                hog = None
            reading = threads.cpu_times()
            time.sleep(0.25)
            elsewhere = threads.busy_elsewhere(reading, threads.cpu_times())
            load = os.getloadavg()[0]
            rows.append((time.monotonic() - start, hog is not None, load, max(1, cores - math.floor(load + 0.25)),
                         elsewhere, threads.free_cores(cores, elsewhere)))
    finally:
        if hog is not None:
            hog.kill()
    print(f"{platform.processor() or platform.machine()}, {cores} usable cores; a one-core busy process for "
          f"{a.seconds:g} s, then none\n")
    print("| s | busy process | load (1 min) | load rule: threads | busy elsewhere (0.25 s) | rule now: threads |")
    print("|---|---|---|---|---|---|")
    for t, running, load, old, elsewhere, new in rows[::4]:
        print(f"| {t:.1f} | {'yes' if running else 'no'} | {load:.2f} | {old} | {elsewhere:.2f} | {new} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", choices=("commands", "after-job", "reaction"), default="commands")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=REPO / "data" / "clustering-seed0.h5",
                    help="after-job: the HDF5 clustering dataset")
    ap.add_argument("--minutes", type=float, default=1.5, help="after-job: each run's net minutes")
    ap.add_argument("--seconds", type=float, default=10.0, help="reaction: how long the busy process runs")
    ap.add_argument("--out", type=Path, default=None, help="scratch folder [default: a temporary one]")
    a = ap.parse_args()
    work = a.out or Path(tempfile.mkdtemp(prefix="swarmctl-shared-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.mode == "reaction":
        reaction(a)
    elif a.mode == "after-job":
        after_job(a, work)
    else:
        commands_table(a, work)


if __name__ == "__main__":
    main()

"""Optimisation steps in equal time: the authors' `amortised_MOG.py` against `swarmctl train swarm-mog`,
SWARM-MoG (64-5-1) with causal pooling (the authors' layer's default), 10 tasks per step, Adam lr 0.01.

    python benchmarks/mog_vs_authors.py --authors DIR [--minutes 4] [--threads N] [--clock wall|cpu]
                                        [--json FILE] [--only authors|swarmctl]

DIR holds the authors' code (amortised_MOG.py with its swarmlayer.py, set_transformer.py and traces.py),
unedited. Each side runs in its own process, one after the other, with the same number of torch threads.
Steps are counted the same way on both sides: a wrapper around `torch.optim.Adam.step`, installed by a
small runner before the script or the command starts. The window opens when the first step ends (imports,
model construction and the first step's one-off costs are outside it) and closes ``--minutes`` later;
the steps finished inside it are counted, and then the process is stopped (the authors' script by an
exception from the wrapper, swarmctl by SIGINT, which it answers by saving its run and stopping). Both
sides validate 100 batches every 500 steps, and that time is inside the window on both sides. The authors'
trace figures, which their own time limit excludes, are switched off (``-update_interval``).

``--clock wall`` (default) is the side-by-side on an idle machine; ``--clock cpu`` measures the window in
the process's CPU time instead (use it with ``--threads 1`` on a busy machine). For the authors' script the
runner supplies the NumPy aliases it uses where NumPy lacks them (``np.int``, ``np.long``); nothing else
is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The runner shared by both sides: argv = [runner, side, minutes, clock, threads, result.json, *command].
RUNNER = r'''
import json, os, signal, sys, time
side, minutes, clock_name, threads, result = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
command = sys.argv[6:]
import numpy as np
import torch
if threads > 0:
    torch.set_num_threads(threads)
clock = time.process_time if clock_name == "cpu" else time.perf_counter
state = {"steps": 0, "start": None, "stopped": False}

class TimeUp(Exception):
    pass

def write(extra=None):
    out = {"side": side, "steps": state["steps"], "clock": clock_name, "threads": torch.get_num_threads(),
           "seconds": (clock() - state["start"]) if state["start"] is not None else 0.0}
    out.update(extra or {})
    with open(result, "w") as f:
        json.dump(out, f)

original = torch.optim.Adam.step

def counted(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    if state["stopped"]:
        return out
    if state["start"] is None:  # the window opens when the first step ends
        state["start"] = clock()
        return out
    if clock() - state["start"] >= 60.0 * minutes:
        state["stopped"] = True
        write({"seconds": 60.0 * minutes})
        if side == "authors":
            raise TimeUp()
        os.kill(os.getpid(), signal.SIGINT)  # swarmctl saves its run and stops after this step
        return out
    state["steps"] += 1
    return out

torch.optim.Adam.step = counted
if side == "authors":
    if not hasattr(np, "long"):
        np.long = np.int64  # the authors' data_fn; missing in NumPy 1.24 to 1.26
    if not hasattr(np, "int"):
        np.int = int  # removed in NumPy 1.24; traces.py uses it
    import runpy
    script = command[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.argv = command
    try:
        runpy.run_path(script, run_name="__main__")
    except TimeUp:
        pass
else:
    import runpy
    sys.argv = ["swarmctl"] + command
    try:
        runpy.run_module("swarmctl", run_name="__main__")
    except SystemExit:
        pass
if not state["stopped"]:
    write({"finished_early": True})
'''


def authors_command(authors: Path, minutes: float, hidden: int = 64) -> list[str]:
    """The authors' script for (64-5-1) (``hidden``: another width, e.g. their default 128), 10 tasks per
    step, lr 0.01 on the CPU; its own limit well past the window (the runner stops it), trace figures off."""
    return [str(authors / "amortised_MOG.py"), "-n_hidden", str(hidden), "-n_iter", "5", "-n_layers", "1", "-bs", "10",
            "-lr", "0.01", "-no_cuda", "-wc", f"{10 * minutes + 5:g}", "-update_interval", "1000000"]


def swarmctl_command(runs_dir: Path, minutes: float) -> list[str]:
    """`swarmctl train` for the same model and protocol; its net budget well past the window."""
    return ["train", "swarm-mog", "--hidden", "64", "--iters", "5", "--layers", "1", "--pooling", "causal",
            "--lr", "0.01", "--batch-size", "10", "--minutes", f"{10 * minutes + 5:g}", "--device", "cpu",
            "--runs-dir", str(runs_dir), "--name", "mog-vs-authors"]


def run_side(side: str, command: list[str], minutes: float, clock: str, threads: int, workdir: Path) -> dict:
    result = workdir / f"{side}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               MPLBACKEND="agg")
    argv = [sys.executable, "-c", RUNNER, side, str(minutes), clock, str(threads), str(result), *command]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if not result.exists():
        sys.exit(f"{side} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(result.read_text())
    res.update(steps_per_second=res["steps"] / res["seconds"] if res["seconds"] else 0.0, process_wall=wall,
               command=command)
    if res.get("finished_early"):
        sys.exit(f"{side} ended before the window closed:\n{proc.stderr[-3000:]}")
    return res


def machine() -> dict:
    import torch

    from swarmctl.devices import cpu_model

    return {"platform": platform.platform(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": __import__("numpy").__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors", type=Path, required=True, help="folder with the authors' amortised_MOG.py")
    ap.add_argument("--minutes", type=float, default=4.0, help="window per side")
    ap.add_argument("--threads", type=int, default=0, help="torch threads on both sides (0: torch's default)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--only", choices=("authors", "swarmctl"), default=None)
    ap.add_argument("--authors-hidden", type=int, default=64,
                    help="the authors' hidden size (their script's default is 128; the comparison is at 64)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    if not (args.authors / "amortised_MOG.py").is_file():
        sys.exit(f"{args.authors}: no amortised_MOG.py there; --authors names the folder of the authors' code")
    if args.minutes <= 0:
        sys.exit("--minutes must be > 0")
    info = {"machine": machine(), "minutes": args.minutes, "clock": args.clock,
            "load_before": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with tempfile.TemporaryDirectory(prefix="mog-vs-authors-") as tmp:
        work = Path(tmp)
        sides = {}
        if args.only in (None, "authors"):
            command = authors_command(args.authors.resolve(), args.minutes, args.authors_hidden)
            sides["authors"] = run_side("authors", command, args.minutes, args.clock, args.threads, work)
            print(f"authors:  {sides['authors']['steps']:6,} steps in {args.minutes:g} min "
                  f"({sides['authors']['steps_per_second']:.2f}/s)", flush=True)
        if args.only in (None, "swarmctl"):
            sides["swarmctl"] = run_side("swarmctl", swarmctl_command(work / "runs", args.minutes), args.minutes,
                                         args.clock, args.threads, work)
            print(f"swarmctl: {sides['swarmctl']['steps']:6,} steps in {args.minutes:g} min "
                  f"({sides['swarmctl']['steps_per_second']:.2f}/s)", flush=True)
    info.update(sides=sides, load_after=os.getloadavg())
    if len(sides) == 2 and sides["authors"]["steps"]:
        info["ratio"] = sides["swarmctl"]["steps"] / sides["authors"]["steps"]
        print(f"ratio:    {info['ratio']:.2f}x")
    m = info["machine"]
    print(f"machine:  {m['cpu']}, {m['cores']} cores, torch {m['torch']}, {sides[next(iter(sides))]['threads']} "
          f"threads, {args.clock} clock; load {info['load_before'][0]:.2f} before, {info['load_after'][0]:.2f} after")
    if args.json:
        args.json.write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()

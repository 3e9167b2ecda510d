"""`python -m tools.figures` (`make figures`): every figure in docs/ drawn again by swarmctl's own commands from
the shipped models (swarmctl/pretrained/) and the committed runs (campaigns/), on the CPU with fixed seeds, so
that no figure in docs/ is older than the code that draws it.

Each figure names what it is drawn from; a figure whose source is not in the repository is not in docs/ either
(tests/tools/test_make_figures.py holds docs/*.png to :func:`figures`, and docs/'s figures to what the tool draws
now). The commands write into a scratch folder and the figures replace docs/'s only once every one of them is
drawn, so a failure leaves docs/ as it was. ``--check`` draws them into a scratch folder only and names each
figure in docs/ that differs from what the code draws now.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmctl.errors import plural

REPO = Path(__file__).resolve().parents[1]
DOCS = "docs"
PRETRAINED = "swarmctl/pretrained"
MNIST_CAMPAIGN = "campaigns/mnist"  # the mnist campaign's run: config.json, metrics.jsonl, best.pt
TABLE_RUNS = "campaigns/clustering-cpu/runs"  # the committed runs of the paper's Table 2 (report's frontier)


@dataclass(frozen=True)
class Step:
    """One command (or library call) and the figures it draws: docs name -> the file it writes in ``work``."""

    source: str  # what it reads, relative to the repository
    outputs: dict[str, str]
    draw: Callable[[Path, Path], None]  # (repository, scratch folder) -> None


def _swarmctl(repo: Path, *args: str) -> None:
    """`python -m swarmctl ARGS` from the repository, on the CPU, the shipped models of its checkout."""
    env = {k: v for k, v in os.environ.items() if k != "SWARMCTL_PRETRAINED"}
    env.update(PYTHONPATH=str(repo), SWARMCTL_NO_DOWNLOAD="1", COLUMNS="120")
    subprocess.run([sys.executable, "-m", "swarmctl", *args], cwd=repo, env=env, check=True)


# the shipped SWARM (192-10-1) on the seed-0 validation task with 7 clusters and 499 points (the dataset is
# generated from its seed where it is missing), on a 75 x 75 grid; `exact`, the paper's definition
ENTROPY_OPTIONS = ("--clusters", "7", "--size", "500", "--grid", "75", "--method", "exact")


def _entropy(repo: Path, work: Path) -> None:
    _swarmctl(repo, "plot-entropy", *ENTROPY_OPTIONS, "--device", "cpu", "--runs-dir", str(work / "runs"),
              "--out", str(work / "entropy"))


def iris_args(work: Path) -> list[str]:
    """The `swarmctl` arguments that draw work/iris.png (run from the repository), as the README's command."""
    return ["cluster", "docs/iris.csv", "--columns", "petal_length,petal_width", "--device", "cpu",
            "--runs-dir", str(work / "runs"), "--plot", str(work / "iris.png"), "--out", str(work / "iris.csv")]


def _iris(repo: Path, work: Path) -> None:
    _swarmctl(repo, *iris_args(work))


def _mnist_samples(repo: Path, work: Path) -> None:
    _swarmctl(repo, "sample", "--dataset", "mnist", "--run", f"{PRETRAINED}/swarm-image-256-10-1-mnist.pt",
              "--per-class", "2", "--seed", "0", "--device", "cpu", "--runs-dir", str(work / "runs"),
              "--out", str(work / "samples-mnist.png"))


def _mnist_curves(repo: Path, work: Path) -> None:
    from swarmctl.files import read_metrics
    from swarmctl.plots.curves import plot_curves
    from swarmctl.plots.style import save_figure
    from swarmctl.rundir import RunDir

    records = read_metrics(RunDir(repo / MNIST_CAMPAIGN).metrics)
    save_figure(plot_curves(records, title="swarm-image (256-10-1), MNIST: the mnist campaign on an H200"),
                work / "curves-mnist.png")


def _frontier(repo: Path, work: Path) -> None:
    _swarmctl(repo, "report", "--runs-dir", TABLE_RUNS, "--out", str(work / "report"))


def figures(repo: Path = REPO) -> list[Step]:
    """What `make figures` draws from ``repo``, in order: the shipped models' figures, then those of committed
    runs that are there (the report's frontier once the Table 2 runs are committed)."""
    steps = [
        Step(f"{PRETRAINED}/swarm-192-10-1-clustering.pt",
             {"entropy.png": "entropy/entropy.png", "classes.png": "entropy/classes.png"}, _entropy),
        Step(f"{PRETRAINED}/swarm-192-10-1-clustering-broad-16slots.pt and docs/iris.csv",
             {"cluster-iris.png": "iris.png"}, _iris),
        Step(f"{PRETRAINED}/swarm-image-256-10-1-mnist.pt", {"samples-mnist-gpu.png": "samples-mnist.png"},
             _mnist_samples),
        Step(f"{MNIST_CAMPAIGN}/metrics.jsonl",
             {"curves-swarm-image-256-10-1-mnist-gpu.png": "curves-mnist.png"}, _mnist_curves),
    ]
    if (repo / TABLE_RUNS).is_dir() and any((repo / TABLE_RUNS).iterdir()):
        steps.append(Step(TABLE_RUNS, {"frontier.png": "report/frontier.png"}, _frontier))
    return steps


def figure_names(repo: Path = REPO) -> list[str]:
    return [name for step in figures(repo) for name in step.outputs]


def make_figures(repo: Path = REPO, out: Path | None = None, only: list[str] | None = None) -> list[Path]:
    """Draw every figure (``only``: those named) and put them in ``out`` (default: repo/docs) once all are drawn."""
    out = repo / DOCS if out is None else out
    steps = figures(repo)
    unknown = sorted(set(only or ()) - set(figure_names(repo)))
    if unknown:
        raise SystemExit(f"no figure named {', '.join(unknown)}; the figures: {', '.join(figure_names(repo))}")
    steps = [s for s in steps if not only or set(s.outputs) & set(only)]
    with tempfile.TemporaryDirectory(prefix="figures-") as tmp:
        work = Path(tmp)
        for step in steps:
            print(f"drawing {', '.join(step.outputs)} from {step.source}", flush=True)
            step.draw(repo, work)
        out.mkdir(parents=True, exist_ok=True)
        pairs = [(work / made, out / name) for step in steps for name, made in step.outputs.items()]
        try:  # every figure copied beside its place first, then each renamed over it: a failure copying leaves none
            for made, dest in pairs:
                shutil.copyfile(made, dest.with_name(f".{dest.name}.tmp"))
            for _, dest in pairs:
                os.replace(dest.with_name(f".{dest.name}.tmp"), dest)
        finally:
            for _, dest in pairs:
                dest.with_name(f".{dest.name}.tmp").unlink(missing_ok=True)
    return [dest for _, dest in pairs]


# Two drawings of one figure are the same picture when they have the same size and at most this share of their
# pixels differs by more than PIXEL_STEP of 255 in a channel: what another build of the font rasteriser or a last
# bit of the arithmetic moves, far below a changed word in a title (0.5 % of the iris figure) or a recoloured panel.
PIXEL_STEP = 32
PIXEL_SHARE = 0.001


def difference(drawn: Path, kept: Path) -> str | None:
    """Why the figure ``kept`` is not the picture ``drawn`` (sizes, or the share of pixels that differ); None
    when it is."""
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(drawn).convert("RGB"), dtype=np.int16)
    try:
        b = np.asarray(Image.open(kept).convert("RGB"), dtype=np.int16)
    except (OSError, ValueError, SyntaxError) as e:  # PIL's errors for a damaged or truncated file
        return f"not a readable image ({e})"
    if a.shape != b.shape:
        return f"{a.shape[1]} x {a.shape[0]} pixels drawn, {b.shape[1]} x {b.shape[0]} kept"
    share = float((np.abs(a - b).max(axis=2) > PIXEL_STEP).mean())
    return None if share <= PIXEL_SHARE else f"{share:.2%} of its pixels differ"


def check_figures(repo: Path = REPO, only: list[str] | None = None) -> dict[str, str]:
    """Draw the figures (``only``: those named) into a scratch folder; each figure of docs/ that is not what the
    code draws now (missing, or another picture) with the reason."""
    with tempfile.TemporaryDirectory(prefix="figures-check-") as tmp:
        out = {}
        for made in make_figures(repo, Path(tmp), only):
            kept = repo / DOCS / made.name
            why = "missing from docs/" if not kept.is_file() else difference(made, kept)
            if why:
                out[made.name] = why
        return out


def main(argv: list[str] | None = None) -> int:
    """The command: its exit code (1: a figure differs, a command failed or a folder cannot be written; 2: a bad
    option; 130: interrupted), with a one-line error, docs/ as it was where no figure was put there."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _interrupted()
    except subprocess.CalledProcessError as e:
        if e.returncode in (130, -signal.SIGINT):  # Ctrl-C reached the command first: interrupted all the same
            return _interrupted()
        print(f"error: `{' '.join(map(str, e.cmd[1:]))}` failed (exit {e.returncode}, its message above); "
              "no figure was replaced", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e.filename}: {e.strerror or e}; the figures need a folder they can be written to (--out)",
              file=sys.stderr)
        return 1


def _interrupted() -> int:
    print("interrupted before the figures were put in place: no figure was replaced", file=sys.stderr)
    return 130


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="figures to draw (default: all)")
    ap.add_argument("--out", type=Path, help="folder to put them in [default: docs/]")
    ap.add_argument("--list", action="store_true", help="print the figures' names and sources, draw nothing")
    ap.add_argument("--check", action="store_true",
                    help="draw into a scratch folder and name each figure in docs/ that differs; docs/ is not changed")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.names) - set(figure_names()))
    if unknown:  # a bad argument, as argparse's: exit 2
        print(f"error: no figure named {', '.join(unknown)}; the figures (--list): {', '.join(figure_names())}",
              file=sys.stderr)
        return 2
    if args.list:
        for step in figures():
            for name in step.outputs:
                print(f"{name}\t{step.source}")
        return 0
    if args.check:
        stale = check_figures(only=args.names or None)
        for name, why in stale.items():
            print(f"docs/{name} is not what the code draws now: {why}; redraw it with `make figures`", file=sys.stderr)
        print(f"{len(stale)} of the figures checked differ" if stale else "docs/'s figures are what the code draws")
        return 1 if stale else 0
    written = make_figures(out=args.out, only=args.names or None)
    if args.out is None and not args.names:
        stray = sorted(p.name for p in (REPO / DOCS).glob("*.png") if p.name not in figure_names())
        if stray:
            print(f"docs/ holds figures no step draws: {', '.join(stray)}; delete them or add their step",
                  file=sys.stderr)
            return 1
    print(f"{plural(len(written), 'figure')} -> {args.out or DOCS}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shared pieces of the single-experiment GPU calls (clustering.py, mog.py, image.py): their options, the
start of a call (the card, the GPU tests), and the JSON summary. The processes, the deadline and the copies
are the campaign job's (tools.campaigns).

Every script runs swarmctl as a user would (``python -m swarmctl ...``) from the repository root, writes
into a work folder, and copies what is worth keeping into the output folder named on its command line.
``--smoke`` shrinks every size so the whole script runs on a CPU in seconds (tests/benchmarks run it).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: the maintainers' tools/
from tools.campaigns.processes import Deadline, finish, gpu_tests, log, start, summary
from tools.campaigns.runners import export_run

REPO = Path(__file__).resolve().parents[2]
logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S", stream=sys.stdout)

__all__ = ["Deadline", "begin", "card", "export_run", "finish", "log", "parser", "run", "start", "summary",
           "write_json"]


def run(args: list[str], logfile: Path, timeout: float) -> int:
    rc = finish(start(args, logfile), timeout)
    log(f"exit {rc}: {' '.join(args[:3])}")
    return rc


def parser(doc: str, name: str, wall: float = 540.0) -> argparse.ArgumentParser:
    """The options every experiment script takes: OUT, --wall, --skip-tests, --work, --smoke."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=wall, help="seconds for the whole script")
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu first")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work" / name)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in seconds on a CPU")
    return ap


def begin(a: argparse.Namespace, fresh: Path) -> tuple[Deadline, dict]:
    """Start the clock, make OUT, empty ``fresh`` (inside the work folder), print the card and run the GPU
    tests unless skipped; returns the deadline and the facts for summary.json."""
    deadline = Deadline(a.wall)
    a.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    facts = {"card": card()}
    if not a.skip_tests:
        facts["gpu_tests_exit"] = gpu_tests(a.out)
    return deadline, facts


def card() -> str:
    """The accelerator (or 'cpu') and the software versions, printed and returned."""
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        what = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
    else:
        what = "cpu (no CUDA)"
    line = f"device: {what}; torch {torch.__version__}; python {sys.version.split()[0]}"
    log(line)
    return line


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
    log(f"{path.name}: {json.dumps(data)}")

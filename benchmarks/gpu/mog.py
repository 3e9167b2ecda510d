"""GPU call (b): parametrized amortized clustering (protocol sec. 4) with swarm-mog (768-20-1).

Tasks are drawn fresh every step; the schedule is the paper's shortened to what the wall budget allows
(--epochs of 500 steps, lr x 0.1 after 70 % of them), then the best checkpoint is scored on the fixed
10,000-task test set next to the oracle log-likelihood of the true parameters. Writes to OUT:
  swarm-mog/: config.json metrics.jsonl curves.png eval-test.json;  summary.json
(no weights: 4.8 M parameters are 19 MB, over what one returned file may hold)

    PYTHONPATH=. python3 benchmarks/gpu/mog.py OUT [--wall 540] [--epochs 30] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from _common import REPO, Deadline, card, export_run, finish, gpu_tests, start, summary, write_json

EVAL_RESERVE_S = 90  # the 10,000-task test set and the export


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=540.0, help="seconds for the whole script")
    ap.add_argument("--epochs", type=int, default=30, help="epochs of 500 steps (the paper: 100)")
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu first")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work" / "mog")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in seconds on a CPU")
    a = ap.parse_args()
    deadline = Deadline(a.wall)
    out, work = a.out, a.work
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    facts = {"card": card()}
    if not a.skip_tests:
        facts["gpu_tests_exit"] = gpu_tests(out)

    epochs = 2 if a.smoke else a.epochs
    size = ["--hidden", "8", "--iters", "2", "--steps-per-epoch", "3", "--val-batches", "2"] if a.smoke else \
        ["--hidden", "768", "--iters", "20", "--layers", "1"]
    minutes = max(deadline.left() - EVAL_RESERVE_S - 30, 6) / 60 / 1.2  # fresh validation tasks: ~20 % beside
    train = start(["train", "swarm-mog", *size, "--max-epochs", str(epochs), "--lr-decay-epoch",
                   str(max(1, round(0.7 * epochs))), "--minutes", f"{minutes:.2f}", "--runs-dir", str(work / "runs"),
                   "--name", "swarm-mog"], out / "train-swarm-mog.txt")
    facts["train_exit"] = finish(train, deadline.left() - EVAL_RESERVE_S + 20)
    test = ["--data", str(work / "test.h5")] if a.smoke else []  # the 10,000 fixed tasks are the default
    if a.smoke:
        facts["gen_exit"] = finish(start(["gen-data", "--task", "mog4", "--tasks", "20", "--out",
                                          str(work / "test.h5")], out / "log.txt"), 60)
    facts["eval_exit"] = finish(start(["eval", "swarm-mog", "--runs-dir", str(work / "runs"), *test],
                                      out / "eval-swarm-mog.txt"), deadline.left() - 10)
    export_run(work / "runs" / "swarm-mog", out / "swarm-mog")
    facts["swarm-mog"] = summary(work / "runs" / "swarm-mog")
    write_json(out / "summary.json", facts)
    return 0 if all(v == 0 for k, v in facts.items() if k.endswith("_exit")) else 1


if __name__ == "__main__":
    raise SystemExit(main())

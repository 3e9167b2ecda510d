"""GPU call (b): parametrized amortized clustering (the paper, sec. 4.2) with swarm-mog (768-20-1).

Tasks are drawn fresh every step; the schedule is the paper's shortened to what the wall budget allows
(--epochs of 500 steps, lr x 0.1 after 70 % of them), then the best checkpoint is scored on the fixed
10,000-task test set next to the oracle log-likelihood of the true parameters. Writes to OUT:
  swarm-mog/: config.json metrics.jsonl curves.png eval-test.json;  summary.json
(no weights: 4.8 M parameters are 19 MB, over what one returned file may hold)

    PYTHONPATH=. python3 benchmarks/gpu/mog.py OUT [--wall 540] [--epochs 30] [--smoke]
"""

from __future__ import annotations

from _common import begin, export_run, finish, parser, start, summary, write_json

EVAL_RESERVE_S = 90  # the 10,000-task test set and the export


def main() -> int:
    ap = parser(__doc__, "mog")
    ap.add_argument("--epochs", type=int, default=30, help="epochs of 500 steps (the paper: 100)")
    a = ap.parse_args()
    out, work = a.out, a.work
    deadline, facts = begin(a, work)

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
        facts["gen_exit"] = finish(start(["gen-data", "--kind", "mog4", "--tasks", "20", "--out",
                                          str(work / "test.h5")], out / "log.txt"), 60)
    facts["eval_exit"] = finish(start(["eval", "swarm-mog", "--runs-dir", str(work / "runs"), *test],
                                      out / "eval-swarm-mog.txt"), deadline.left() - 10)
    export_run(work / "runs" / "swarm-mog", out / "swarm-mog")
    facts["swarm-mog"] = summary(work / "runs" / "swarm-mog")
    write_json(out / "summary.json", facts)
    return 0 if all(v == 0 for k, v in facts.items() if k.endswith("_exit")) else 1


if __name__ == "__main__":
    raise SystemExit(main())

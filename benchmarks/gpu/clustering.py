"""GPU call (a): direct amortized clustering on the full seed-0 data (the paper, sec. 4.1).

SWARM (192-10-1), and with --with-st the Set Transformer (32-60-3) beside it on the same card, trained
for what the wall budget leaves, evaluated on the validation split (with the true mixture's oracle),
and the SWARM model's entropy map for the README. Writes to OUT:
  swarm/ and set-transformer/: config.json metrics.jsonl curves.png eval-val.json weights.pt
  (with --keep-checkpoints also best.pt and last.pt, to continue the run elsewhere)
  entropy/: entropy.png classes.png entropy.npz;  summary.json

    PYTHONPATH=. python3 benchmarks/gpu/clustering.py OUT [--wall 540] [--with-st] [--compile] [--smoke]
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _common import begin, export_run, finish, log, parser, run, start, summary, write_json

from swarmctl.rundir import CHECKPOINTS


def main() -> int:
    ap = parser(__doc__, "clustering")
    ap.add_argument("--data", type=Path, help="an existing seed-0 clustering file (default: generate it)")
    ap.add_argument("--with-st", action="store_true", help="train the Set Transformer (32-60-3) alongside")
    ap.add_argument("--compile", action="store_true", help="train with the compiled SWARM step")
    ap.add_argument("--keep-checkpoints", action="store_true", help="also copy best.pt and last.pt to OUT")
    ap.add_argument("--reserve", type=float, default=110.0,
                    help="seconds kept after training for evaluation, the entropy map and the exports")
    a = ap.parse_args()
    out, work = a.out, a.work
    deadline, facts = begin(a, work / "runs")  # a data file already in the work folder is kept

    data = a.data or work / "clustering-seed0.h5"
    if not data.is_file():
        size = ["--tasks", "60", "--n-min", "20", "--n-max", "60"] if a.smoke else []
        if run(["gen-data", "--seed", "0", "--out", str(data), *size], out / "log.txt", deadline.left() - 60):
            return 1

    models = [("swarm", ["--hidden", "192", "--iters", "10", "--layers", "1"])]
    if a.with_st:
        models.append(("set-transformer", ["--hidden", "32", "--inducing", "60", "--layers", "3"]))
    train_s = deadline.left() - a.reserve
    minutes = max(train_s - 30, 6) / 60 / 1.15  # validation and checkpoints take ~15 % beside the net budget
    extra = (["--max-epochs", "2"] if a.smoke else []) + (["--step", "compile"] if a.compile else [])
    if a.smoke:
        models = [(m, ["--hidden", "8", "--iters", "2"] if m == "swarm" else ["--hidden", "8", "--inducing", "4",
                                                                                "--heads", "2"])
                  for m, _ in models]
    procs = {m: start(["train", m, *opts, "--minutes", f"{minutes:.2f}", "--data", str(data), "--runs-dir",
                       str(work / "runs"), "--name", m, *extra], out / f"train-{m}.txt") for m, opts in models}
    for m, proc in procs.items():
        facts[f"train_{m}_exit"] = finish(proc, deadline.left() - a.reserve + 30)
    evals = {m: start(["eval", m, "--runs-dir", str(work / "runs")], out / f"eval-{m}.txt") for m in procs}
    for m, proc in evals.items():
        facts[f"eval_{m}_exit"] = finish(proc, deadline.left() - 60)
        export_run(work / "runs" / m, out / m, weights_name="weights.pt")
        for name in CHECKPOINTS if a.keep_checkpoints else ():
            if (work / "runs" / m / name).is_file():
                shutil.copy2(work / "runs" / m / name, out / m / name)
        facts[m] = summary(work / "runs" / m)

    grid, size = ("12", "40") if a.smoke else ("150", "500")
    if deadline.left() > 45:
        facts["entropy_exit"] = run(["plot-entropy", "swarm", "--runs-dir", str(work / "runs"), "--clusters", "7",
                                     "--size", size, "--grid", grid, "--out", str(out / "entropy")],
                                    out / "log.txt", deadline.left() - 15)
    else:
        log("no time left for the entropy map")
    write_json(out / "summary.json", facts)
    return 0 if all(v == 0 for k, v in facts.items() if k.endswith("_exit")) else 1


if __name__ == "__main__":
    raise SystemExit(main())

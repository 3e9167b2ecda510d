"""GPU call (c): the SWARM Transformer (256-10-1) on MNIST (the paper, sec. 4.3), resumable across calls.

Trains for what the wall budget leaves (or continues from a returned last.pt with --resume), scores the
best checkpoint on the test split in bits/dim, and draws 20 class-conditional samples. The image files
travel with the checkout: torchvision's layout under --data-dir (default data/, i.e.
data/MNIST/raw/*-ubyte.gz). Writes to OUT:
  swarm-image/: config.json metrics.jsonl curves.png eval-test.json weights.pt samples.png
  last.pt best.pt (with optimizer state: to continue in the next call);  summary.json

    PYTHONPATH=. python3 benchmarks/gpu/image.py OUT [--wall 540] [--resume PREVIOUS_OUT] [--smoke]
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _common import begin, export_run, finish, parser, start, summary, write_json

from swarmctl.config import DATA_DIR
from swarmctl.rundir import BEST, CHECKPOINTS, LAST, RunDir

EVAL_RESERVE_S = 90  # the 10,000 test images, the samples and the exports


def main() -> int:
    ap = parser(__doc__, "image")
    ap.add_argument("--dataset", default="mnist", help="mnist or fashion-mnist")
    ap.add_argument("--data-dir", type=Path, default=Path(DATA_DIR), help="relative to the repository root")
    ap.add_argument("--resume", type=Path, help="an earlier call's OUT (last.pt, best.pt, swarm-image/metrics.jsonl): "
                    "continue that run")
    a = ap.parse_args()
    out, work = a.out, a.work
    run_dir = work / "runs" / "swarm-image"
    deadline, facts = begin(a, run_dir)

    minutes = max(deadline.left() - EVAL_RESERVE_S - 30, 6) / 60 / 1.2  # the test split validates: ~20 % beside
    common = ["--minutes", f"{minutes:.2f}", "--runs-dir", str(work / "runs")]
    if a.resume:  # the run folder is rebuilt from the returned files: the config is inside the checkpoint
        import json

        import torch

        ckpt = torch.load(a.resume / LAST, map_location="cpu", weights_only=True)
        RunDir(run_dir).config.write_text(json.dumps(ckpt["config"], indent=2) + "\n")
        for src in (a.resume / LAST, a.resume / BEST, RunDir(a.resume / "swarm-image").metrics):
            if src.is_file():
                shutil.copy2(src, run_dir / src.name)
        done = ckpt["state"]["net_seconds"] / 60
        args = ["train", "swarm-image", "--resume", "swarm-image", *common]
        args[args.index("--minutes") + 1] = f"{done + minutes:.2f}"  # the budget is a run total
        if a.smoke:
            args += ["--max-epochs", str(ckpt["state"]["epoch"] + 1)]
    else:
        size = ["--hidden", "8", "--iters", "2", "--max-epochs", "2"] if a.smoke else ["--hidden", "256", "--iters",
                                                                                       "10", "--layers", "1"]
        args = ["train", "swarm-image", "--dataset", a.dataset, "--data-dir", str(a.data_dir), *size, "--name",
                "swarm-image", *common]
    facts["train_exit"] = finish(start(args, out / "train-swarm-image.txt"), deadline.left() - EVAL_RESERVE_S + 20)
    facts["eval_exit"] = finish(start(["eval", "swarm-image", "--runs-dir", str(work / "runs")],
                                      out / "eval-swarm-image.txt"), deadline.left() - 40)
    facts["sample_exit"] = finish(start(["sample", "--run", "swarm-image", "--dataset", a.dataset, "--runs-dir",
                                         str(work / "runs"), "--out", str(run_dir / "samples.png")],
                                        out / "log.txt"), deadline.left() - 10)
    export_run(run_dir, out / "swarm-image", weights_name="weights.pt")
    if (run_dir / "samples.png").is_file():
        shutil.copy2(run_dir / "samples.png", out / "swarm-image" / "samples.png")
    for name in CHECKPOINTS:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, out / name)
    facts["swarm-image"] = summary(run_dir)
    write_json(out / "summary.json", facts)
    return 0 if all(v == 0 for k, v in facts.items() if k.endswith("_exit")) else 1


if __name__ == "__main__":
    raise SystemExit(main())

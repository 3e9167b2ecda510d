"""Train the SWARM Transformer on real MNIST and Fashion-MNIST on the CPU for a short budget and report
test bits/dim (the official test split, as in the paper), the curve, and a sample grid.

The real files come from ../shared/data (gzip IDX); they are copied into the data folder, data/ (git-ignored),
in torchvision's layout. The CPU model is small (default 64-5-1) so that an epoch of 150 steps and a
full test-set validation fit in minutes; the paper's 256-10-1 needs a GPU.

    python benchmarks/image_quality.py [--minutes 8] [--hidden 64] [--iters 5] [--datasets mnist fashion-mnist]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

import torch

from swarmctl.config import DATA_DIR, DataConfig, ModelConfig, TrainConfig
from swarmctl.plots.samples import plot_samples
from swarmctl.plots.style import save_figure
from swarmctl.rundir import RunDir
from swarmctl.runs import load_model, start_run
from swarmctl.studies.sampling import sample_grid

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"mnist": ("mnist", "MNIST"), "fashion-mnist": ("fashion-mnist", "FashionMNIST")}


def copy_real_files(shared: Path, dest: Path, dataset: str) -> None:
    src_name, folder = SOURCES[dataset]
    raw = dest / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for f in sorted((shared / src_name).glob("*.gz")):
        if not (raw / f.name).exists():
            shutil.copyfile(f, raw / f.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--steps-per-epoch", type=int, default=150)
    ap.add_argument("--datasets", nargs="*", default=list(SOURCES))
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--data-dir", type=Path, default=ROOT / DATA_DIR)
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "bench-images")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    rows = []
    for dataset in args.datasets:
        copy_real_files(args.shared, args.data_dir, dataset)
        name = f"{dataset}-{args.hidden}-{args.iters}-1"
        res = start_run(ModelConfig(name="swarm-image", dataset=dataset, dim_hidden=args.hidden, n_iter=args.iters),
                        TrainConfig(lr=1e-3, batch_size=50, minutes=args.minutes, beta=0.1, device=args.device,
                                    steps_per_epoch=args.steps_per_epoch),
                        DataConfig(path=str(args.data_dir), dataset=dataset), args.runs_dir, name)
        records = [json.loads(x) for x in RunDir(res.run_dir).metrics.read_text().splitlines()]
        model, _ = load_model(RunDir(res.run_dir).best, args.device)
        grid = sample_grid(model, dataset, per_class=4, seed=0, device=args.device)
        args.docs.mkdir(exist_ok=True)
        save_figure(plot_samples(grid.images, f"swarm-image ({args.hidden}-{args.iters}-1), {dataset}, "
                                              f"{res.net_seconds / 60:.0f} net min on {args.device}"),
                    args.docs / f"samples-{dataset}-{args.device}.png")
        rows.append((dataset, res.best_val / 0.6931471805599453, res.epochs, sum(r["batches"] for r in records) * 50,
                     res.net_seconds / 60, [round(r["val_bits_per_dim"], 3) for r in records], grid.seconds))
        print(f"{dataset}: best test {rows[-1][1]:.3f} bits/dim", flush=True)

    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.machine() + " CPU"
    print(f"\ndevice: {dev}, torch {torch.__version__}, {torch.get_num_threads()} threads; model swarm-image "
          f"({args.hidden}-{args.iters}-1), batch 50, lr 1e-3, {args.steps_per_epoch} steps per epoch")
    print("| dataset | best test bits/dim | epochs | images seen | net min | curve (test bits/dim per epoch) | "
          "sampling 40 images (s) |")
    print("|---|---|---|---|---|---|---|")
    for d, b, e, seen, m, curve, s in rows:
        print(f"| {d} | {b:.3f} | {e} | {seen:,} | {m:.1f} | {', '.join(map(str, curve))} | {s:.1f} |")


if __name__ == "__main__":
    main()

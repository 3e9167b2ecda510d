"""Train each of the six clustering models for the same net CPU budget on a reduced dataset and print
a table in the form of the paper's Table 2 (model, code, parameters, epochs reached, best val loss).

    python benchmarks/clustering_cpu.py [--minutes 5] [--tasks 2000] [--n-max 300] [--out DIR]

Models run at the paper's best codes (the registry defaults). Nothing is tuned to the paper's ranking.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.models import complete_config, count_parameters, create_model, paper_code
from swarmctl.runs import evaluate_run, open_run, start_run

MODELS = ["swarm", "set-transformer", "lstm-sorted", "lstm", "set-linear", "set-linear-max"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="net training budget per model")
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--n-max", type=int, default=300)
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--out", type=Path, default=None, help="folder for data and runs [default: a temp folder]")
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="swarmctl-bench-"))
    data = out / "bench.h5"
    if not data.exists():
        generate_dataset(data, ClusteringParams(n_tasks=args.tasks, n_max=args.n_max), seed=0)
    rows = []
    for name in args.models:
        cfg = complete_config(ModelConfig(name=name))
        t0 = time.monotonic()
        res = start_run(cfg, TrainConfig(minutes=args.minutes, device="cpu"), DataConfig(path=str(data)),
                               out / "runs", f"{name}-{paper_code(cfg)}")
        ev = evaluate_run(open_run(res.run_dir, out / "runs", "cpu"))
        rows.append((name, paper_code(cfg), count_parameters(create_model(cfg)), res.epochs, res.best_val,
                     ev["accuracy"], ev["oracle_loss"], time.monotonic() - t0))
        print(f"{name}: best val {res.best_val:.4f} after {res.epochs} epochs", flush=True)

    print(f"\nmachine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
          f"data: {args.tasks} tasks (10 % validation), N in 100..{args.n_max}, seed 0; "
          f"budget {args.minutes:g} net min per model")
    print("| model | code | parameters | epochs | best val loss | matched acc. | oracle |")
    print("|---|---|---|---|---|---|---|")
    for name, code, params, epochs, best, acc, oracle, _ in sorted(rows, key=lambda r: r[4]):
        print(f"| {name} | ({code}) | {params:,} | {epochs} | {best:.3f} | {acc:.1%} | {oracle:.3f} |")


if __name__ == "__main__":
    main()

"""SWARM + mean pooling against the Set Transformer (ISAB + PMA) on parametrized amortized clustering,
at the same CPU budget: test log-likelihood per point next to the oracle on the same fixed tasks.

    python benchmarks/mog_cpu.py [--minutes 5] [--swarm-hidden 128] [--swarm-iters 10] [--test-tasks 1000]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.hdf5 import generate_mog_dataset
from swarmctl.models import count_parameters, create_model, paper_code
from swarmctl.runs import evaluate_run, open_run, start_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--swarm-hidden", type=int, default=128)
    ap.add_argument("--swarm-iters", type=int, default=10)
    ap.add_argument("--test-tasks", type=int, default=1000)
    ap.add_argument("--steps-per-epoch", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="swarmctl-mog-"))
    test = out / "mog4-test.h5"
    if not test.exists():
        generate_mog_dataset(test, args.test_tasks, seed=0)
    configs = [ModelConfig(name="swarm-mog", dim_hidden=args.swarm_hidden, n_iter=args.swarm_iters),
               ModelConfig(name="set-transformer-mog")]
    rows = []
    for cfg in configs:
        train = TrainConfig(lr=1e-3 if cfg.name.startswith("set") else 0.01, batch_size=10, minutes=args.minutes,
                            max_epochs=100_000, steps_per_epoch=args.steps_per_epoch, val_batches=20, beta=1.0,
                            alpha=0.8, device=args.device)
        res = start_run(cfg, train, DataConfig(path=None), out / "runs", f"{cfg.name}-{paper_code(cfg)}")
        ev = evaluate_run(open_run(res.run_dir, out / "runs", args.device), data=test)
        rows.append((cfg.name, paper_code(cfg), count_parameters(create_model(cfg)), res.epochs * args.steps_per_epoch,
                     ev["log_likelihood"], ev["oracle_log_likelihood"], train.lr))
        print(f"{cfg.name}: test LL {ev['log_likelihood']:.4f} (oracle {ev['oracle_log_likelihood']:.4f})", flush=True)
    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.machine() + " CPU"
    print(f"\ndevice: {dev}, {torch.get_num_threads()} threads; {args.minutes:g} net min each, batches of 10 fresh "
          f"tasks; test: {args.test_tasks} fixed tasks (seed 0)")
    print("| model | code | parameters | lr | steps | test LL | oracle LL | gap |")
    print("|---|---|---|---|---|---|---|---|")
    for name, code, params, steps, ll, oracle, lr in rows:
        print(f"| {name} | ({code}) | {params:,} | {lr:g} | {steps:,} | {ll:.4f} | {oracle:.4f} | {oracle - ll:.4f} |")


if __name__ == "__main__":
    main()

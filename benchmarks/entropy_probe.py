"""plot-entropy: accuracy and speed of ``--method probe`` against ``--method exact`` on a trained model.

    python benchmarks/entropy_probe.py RUN [--runs-dir runs] [--sizes 100 500] [--grid-exact 30]
                                           [--grid-probe 150] [--repeats 3]

For each target size N it picks the validation task whose size is closest, computes x*'s class
distribution on the same ``--grid-exact`` grid with both methods (side by side, one process) and prints
max and mean |H_probe - H_exact| in nats and the max |p_probe - p_exact|, then the probe's time for the
README figure (``--grid-probe`` squared locations, best of ``--repeats`` wall-clock runs; their process
CPU times too, which a shared machine disturbs less) and the speed-up per grid
location against exact. Targets: probe within 0.05 nats of exact everywhere for N >= 100, and
the 150 x 150 map at N 500 in at most 10 s on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch

from swarmctl.config import ModelConfig, from_dict
from swarmctl.data.hdf5 import read_split
from swarmctl.models import paper_code
from swarmctl.runs import find_checkpoint, load_model
from swarmctl.studies.entropy import compute_entropy_map


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"))
    ap.add_argument("--data", type=Path, default=None, help="HDF5 dataset [default: the run's]")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--grid-exact", type=int, default=30)
    ap.add_argument("--grid-probe", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    model, ckpt = load_model(find_checkpoint(args.run, args.runs_dir), "cpu")
    cfg = from_dict(ModelConfig, ckpt["config"]["model"])
    label = f"{cfg.name} ({paper_code(cfg)})"
    tasks, _ = read_split(Path(args.data or ckpt["config"]["data"]["path"]), "val")
    print(f"model {label}, best val {ckpt['state']['best_val']:.4f}; machine: {platform.machine()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    rows = []
    for target in args.sizes:
        index = int(np.argmin(np.abs(tasks.sizes - target)))
        n, k = int(tasks.sizes[index]), int(tasks.n_clusters[index])
        exact = compute_entropy_map(model, tasks, index, label, args.grid_exact, method="exact")
        probe = compute_entropy_map(model, tasks, index, label, args.grid_exact, method="probe")
        dh = np.abs(probe.entropy - exact.entropy)
        dp = np.abs(probe.probs - exact.probs).max()
        per_exact = exact.seconds / args.grid_exact**2
        times, cpu = [], []
        for _ in range(args.repeats):
            c0 = time.process_time()
            times.append(compute_entropy_map(model, tasks, index, label, args.grid_probe, method="probe").seconds)
            cpu.append(time.process_time() - c0)
        per_probe = min(times) / args.grid_probe**2
        rows.append((n, k, dh.max(), dh.mean(), dp, exact.seconds, probe.seconds, min(times), per_exact / per_probe))
        print(f"task {index}: N {n}, K {k}: |dH| max {dh.max():.4f} mean {dh.mean():.5f} nats, |dp| max {dp:.4f}; "
              f"{args.grid_exact}^2 grid: exact {exact.seconds:.1f} s, probe {probe.seconds:.2f} s; "
              f"{args.grid_probe}^2 probe {min(times):.2f} s (runs {', '.join(f'{t:.2f}' for t in times)}; "
              f"process CPU {', '.join(f'{t:.2f}' for t in cpu)} s)",
              flush=True)
    print(f"\n| N | K | max abs dH (nats) | mean abs dH | max abs dp | exact {args.grid_exact}² | "
          f"probe {args.grid_exact}² | probe {args.grid_probe}² | speed-up per location |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, k, dmax, dmean, dp, te, tp, tp_big, speedup in rows:
        print(f"| {n} | {k} | {dmax:.4f} | {dmean:.5f} | {dp:.4f} | {te:.1f} s | {tp:.2f} s | {tp_big:.2f} s | "
              f"{speedup:,.0f}× |")


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"total {time.monotonic() - start:.0f} s")

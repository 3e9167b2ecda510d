"""What each of Table 2's six configurations costs on this CPU: seconds per training step and per epoch on the
full seed-0 data, at each thread count asked for, measured with the trainer's own step (forward, loss,
backward, Adam) on the real bucketed batches.

    python benchmarks/table2_cpu_cost.py [--threads 1 2] [--steps 9] [--out campaigns/clustering-cpu/cost.json]

An epoch is 90 steps of 100 tasks whose sizes grow through the bucketed order, so the steps timed are spread
evenly over that order (``--steps`` of them, after one warm-up step on the smallest batch) and their mean
times 90 is the epoch; the validation pass is timed the same way over its batches. The JSON names the
machine, the date, torch's version and the load average before and after each model, because a second
process on the machine changes these numbers (say what else ran). `python -m tools.campaigns status` reads
it for the CPU table's plan; it decides nothing else.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
from pathlib import Path

import torch

from swarmctl.config import DataConfig, TrainConfig
from swarmctl.devices import cpu_model
from swarmctl.models import count_parameters, create_model, paper_code
from swarmctl.studies.sweep import expand, load_spec
from swarmctl.tasks import get_task
from swarmctl.training.steps import TrainStep

SPEC = Path("sweeps") / "best.toml"


def spread(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)``, the first and the last included."""
    k = max(1, min(k, n))
    return sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})


def time_config(cfg, data, steps: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = create_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = TrainStep(model, opt, data.loss_fn, torch.device("cpu"))
    train = list(data.train_batches(0))
    order = sorted(range(len(train)), key=lambda i: train[i].x.shape[1])  # smallest sets first
    step(train[order[0]])  # warm-up: allocator, first-call dispatch
    times, cpu = [], []
    for i in spread(len(order), steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step(train[order[i]])
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    val = list(data.val_batches(0))
    model.eval()
    val_times = []
    with torch.no_grad():
        for i in spread(len(val), max(2, steps // 3)):
            t0 = time.perf_counter()
            data.loss_fn(model, val[i]).sum().item()
            val_times.append(time.perf_counter() - t0)
    per_step, cpu_step = statistics.fmean(times), statistics.fmean(cpu)
    # wall seconds are what a run gets; CPU seconds (all threads) stay near the quiet machine's wall on one
    # thread while other processes share the core, so the plan can read a 1-thread cost off a busy machine
    return {"threads": threads, "s_per_step": round(per_step, 4), "cpu_s_per_step": round(cpu_step, 4),
            "steps_timed": len(times), "s_per_epoch": round(per_step * len(train), 1),
            "cpu_s_per_epoch": round(cpu_step * len(train), 1),
            "validation_s": round(statistics.fmean(val_times) * len(val), 1),
            "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=9, help="steps timed per configuration and thread count")
    ap.add_argument("--data", type=Path, default=Path("data/clustering-seed0.h5"))
    ap.add_argument("--models", nargs="*", default=None, help="only these models (registry names)")
    ap.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here as well as printing it")
    args = ap.parse_args()

    task = get_task("clustering")
    data = task.prepare(TrainConfig(device="cpu"), DataConfig(path=str(args.data)))
    rows = []
    for run in expand(load_spec(SPEC)):
        cfg = run.model
        if run.seed != 0 or (args.models and cfg.name not in args.models):
            continue
        row = {"model": cfg.name, "code": paper_code(cfg), "parameters": count_parameters(create_model(cfg)),
               "steps_per_epoch": len(data.train_batches(0)), "load_before": round(os.getloadavg()[0], 2),
               "timings": [time_config(cfg, data, args.steps, t) for t in args.threads]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"benchmark": "benchmarks/table2_cpu_cost.py", "date": datetime.date.today().isoformat(),
              "machine": f"{cpu_model()}, {os.cpu_count()} cores", "torch": torch.__version__,
              "data": str(args.data), "note": args.note, "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

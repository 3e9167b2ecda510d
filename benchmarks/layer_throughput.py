"""Time one Adam training step of swarmctl's SWARM layer against a naive formulation, side by side.

Paper shape by default: 50 sets of 550 entities, 2 inputs, hidden 192, 10 iterations, 10 outputs.
Runs alternate between the variants in one process; the median of --repeats steps is reported, with
the machine's measured fp32 GEMM rate and each variant's useful-FLOP rate.

    python benchmarks/layer_throughput.py [--compile] [--device cuda] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_swarm import NaiveSwarmLayer  # noqa: E402

from swarmctl.layers.swarm import SwarmLayer  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def gemm_gflops(device: torch.device, n: int = 2048, reps: int = 10) -> float:
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def useful_flops(B: int, N: int, D: int, H: int, T: int, C: int) -> float:
    """FLOPs of the fast formulation's training step: forward GEMMs x 3 (forward + two backward GEMMs)."""
    rows = B * N
    fwd = 2 * rows * D * 4 * H  # input projection, once
    fwd += (T - 1) * (2 * rows * H * 4 * H + 2 * B * H * 4 * H)  # recurrent per entity, population per set
    fwd += 2 * rows * 2 * H * C  # output layer
    return 3 * fwd


def make_step(model: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, y: torch.Tensor):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x, mask)
        F.cross_entropy(logits[mask], y[mask]).backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=50)
    ap.add_argument("--entities", type=int, default=550)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compile", action="store_true", help="also time the library layer with a compiled step")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    B, N, D, H, T, C = args.sets, args.entities, 2, args.hidden, args.iters, 10
    x = torch.randn(B, N, D, device=device)
    mask = torch.ones(B, N, dtype=torch.bool, device=device)
    y = torch.randint(0, C, (B, N), device=device)

    variants = {
        "naive": NaiveSwarmLayer(D, H, C, T).to(device),
        "swarmctl": SwarmLayer(D, H, C, T).to(device),
    }
    if args.compile:
        compiled = SwarmLayer(D, H, C, T).to(device)
        compiled.compile_step()
        variants["swarmctl+compile"] = compiled
    steps = {name: make_step(m, x, mask, y) for name, m in variants.items()}
    for step in steps.values():  # warm-up (and compilation)
        step()
        step()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            sync(device)
            t = time.perf_counter()
            step()
            sync(device)
            times[name].append(time.perf_counter() - t)

    gf = gemm_gflops(device)
    flops = useful_flops(B, N, D, H, T, C)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"device: {device.type} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"cpus {os.cpu_count()}")
    print(f"shape: {B} sets x {N} entities, D_in {D}, hidden {H}, {T} iterations, {C} outputs")
    print(f"fp32 GEMM (2048^3): {gf:.1f} GFLOP/s")
    base = statistics.median(times["naive"])
    print(f"{'variant':<18} {'median s/step':>14} {'vs naive':>9} {'useful GFLOP/s':>15}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<18} {med:>14.4f} {base / med:>8.2f}x {flops / med / 1e9:>15.1f}")


if __name__ == "__main__":
    main()

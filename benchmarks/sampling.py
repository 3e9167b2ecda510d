"""Images per second of the SWARM Transformer's two samplers, side by side in one process.

28 x 28 grey images, hidden 256, 10 iterations (the MNIST model's shape), 20 images per batch (two
per class, as the paper's sampling script draws them). The
incremental sampler runs to the end; the full-recompute sampler costs one full forward pass per
sub-pixel whatever the position, so it is timed over --full-steps sub-pixels and scaled to 784 (both
numbers are printed).

    python benchmarks/sampling.py [--hidden 256] [--iters 10] [--batch 20] [--full-steps 8]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from swarmctl.models.image import SwarmTransformer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--full-steps", type=int, default=8)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = SwarmTransformer(1, args.size, args.size, args.hidden, args.iters).to(device).eval()
    y = torch.arange(args.batch, device=device) % 10
    T = model.n_positions

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    model.sample(y, generator=torch.Generator(device=device).manual_seed(0), incremental=True)
    sync()
    inc = time.perf_counter() - t0

    canvas = torch.zeros(args.batch, 1, args.size, args.size, dtype=torch.long, device=device)
    with torch.no_grad():
        model(canvas, y)  # warm-up
        sync()
        t0 = time.perf_counter()
        for t in range(args.full_steps):  # the reference loop: full pass, take position t, sample, write
            logits = model(canvas, y)[:, t]
            value = torch.distributions.Categorical(logits=logits).sample()
            canvas.view(args.batch, -1)[:, t] = value
        sync()
        full_step = (time.perf_counter() - t0) / args.full_steps
    full = full_step * T
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    print(f"device: {device.type} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"model: hidden {args.hidden}, {args.iters} iterations, {args.size}x{args.size}x1 = {T} sub-pixels; "
          f"batch {args.batch}")
    print("| sampler | seconds per batch | images/s |")
    print("|---|---|---|")
    print(f"| incremental (measured, {T} steps) | {inc:.2f} | {args.batch / inc:.3f} |")
    print(f"| full recompute ({args.full_steps} steps measured, x{T / args.full_steps:.0f}) | {full:.1f} | "
          f"{args.batch / full:.5f} |")
    print(f"speed-up: {full / inc:.0f}x")


if __name__ == "__main__":
    main()

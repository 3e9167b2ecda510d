"""Seconds per training epoch and per step on the device, measured with swarmctl's own trainer pieces.

(1) SWARM (192-10-1) on the real seed-0 data: one epoch = the 90 bucketed batches of 100 tasks (9,000
tasks), Adam, Hungarian-matched loss, batches already on the device, in each numeric mode: TF32
(the CUDA default), strict float32, bf16 autocast, and TF32 with the compiled step. The validation loss
of one set of weights under each mode shows what the mode does to the loss.
(2) swarm-mog (768-20-1): ms per step of 10 fresh tasks.  (3) swarm-image (256-10-1): seconds per
MNIST epoch (1,200 steps of 50 images), extrapolated from timed steps.

    PYTHONPATH=. python3 benchmarks/gpu/step_timing.py DATA.h5 [--device cuda] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from swarmctl import ModelConfig, create_model
from swarmctl.data.dataset import bucketed_batches
from swarmctl.data.hdf5 import read_dataset
from swarmctl.data.images import ImageBatch
from swarmctl.data.mog import FreshBatches, MogParams
from swarmctl.tasks.clustering import clustering_loss
from swarmctl.tasks.image import image_loss
from swarmctl.tasks.mog import mog_loss
from swarmctl.training.device import use_tf32


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_epoch(model, opt, batches, loss_fn, amp: bool, device) -> float:
    sync(device)
    t = time.perf_counter()
    for batch in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model, batch).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync(device)
    return time.perf_counter() - t


@torch.no_grad()
def val_loss(model, batches, amp: bool, device) -> float:
    model.eval()
    total = n = 0
    for b in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            losses = clustering_loss(model, b)
        total, n = total + losses.double().sum().item(), n + len(losses)
    model.train()
    return total / n


def clustering(data, device, smoke: bool, compiled: bool) -> None:
    splits, info = read_dataset(data)
    train = [b.to(device) for b in bucketed_batches(splits["train"], 100)]
    val = [b.to(device) for b in bucketed_batches(splits["val"], 100)]
    H, T = (8, 2) if smoke else (192, 10)
    modes = [("tf32+compile", True, False, True)] if compiled else [
        ("tf32", True, False, False), ("fp32", False, False, False), ("bf16-autocast", True, True, False)]
    print(f"clustering: SWARM ({H}-{T}-1), {len(train)} batches of <= 100 tasks per epoch; data checksum "
          f"{info['checksum'][:16]}", flush=True)
    torch.manual_seed(0)
    ref = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T))
    for name, tf32, amp, compiled in modes:
        use_tf32(tf32)
        model = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T)).to(device)
        model.load_state_dict(ref.state_dict())
        if compiled:
            model.compile_steps()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        first = timed_epoch(model, opt, train, clustering_loss, amp, device)  # warm-up (and compilation)
        second = timed_epoch(model, opt, train, clustering_loss, amp, device)
        print(f"  {name:<14} epoch {second:6.2f} s (first, with warm-up {first:6.2f} s)", flush=True)
    use_tf32(True)
    if compiled:
        return
    trained = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T)).to(device)
    trained.load_state_dict(ref.state_dict())
    opt = torch.optim.Adam(trained.parameters(), lr=0.01)
    for _ in range(1 if smoke else 3):
        timed_epoch(trained, opt, train, clustering_loss, False, device)
    losses = {}
    for name, tf32, amp in (("fp32", False, False), ("tf32", True, False), ("bf16-autocast", True, True)):
        use_tf32(tf32)
        losses[name] = val_loss(trained, val, amp, device)
    use_tf32(True)
    print("  validation loss of the same weights (3 epochs trained): "
          + ", ".join(f"{k} {v:.5f}" for k, v in losses.items()), flush=True)


def mog(device, smoke: bool) -> None:
    H, T = (8, 2) if smoke else (768, 20)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=H, n_iter=T)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batches = [b.to(device) for b in FreshBatches(30, 10, 0, 0, 0, MogParams())]
    timed_epoch(model, opt, batches[:5], mog_loss, False, device)
    per_step = [timed_epoch(model, opt, [b], mog_loss, False, device) for b in batches[5:]]
    print(f"mog: swarm-mog ({H}-{T}-1), 10 tasks per step: median {statistics.median(per_step) * 1e3:.1f} ms/step",
          flush=True)


def image(device, smoke: bool) -> None:
    H, T = (8, 2) if smoke else (256, 10)
    model = create_model(ModelConfig(name="swarm-image", dim_hidden=H, n_iter=T, dataset="mnist")).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batches = [ImageBatch(torch.randint(0, 256, (50, 1, 28, 28), generator=gen), torch.randint(0, 10, (50,),
                          generator=gen)).to(device) for _ in range(12)]
    timed_epoch(model, opt, batches[:2], image_loss, False, device)
    for amp in (False, True):
        t = timed_epoch(model, opt, batches[2:], image_loss, amp, device) / len(batches[2:])
        print(f"image: swarm-image ({H}-{T}-1), batch 50{' bf16-autocast' if amp else ''}: {t * 1e3:.1f} ms/step, "
              f"{t * 1200:.1f} s per MNIST epoch (1,200 steps)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="the seed-0 clustering file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", choices=["clustering", "mog", "image"], action="append")
    ap.add_argument("--smoke", action="store_true", help="tiny models: seconds on a CPU")
    a = ap.parse_args()
    device = torch.device(a.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    for part in a.only or ["clustering", "mog", "image"]:
        {"clustering": lambda: clustering(a.data, device, a.smoke, compiled=False), "mog": lambda: mog(device, a.smoke),
         "image": lambda: image(device, a.smoke)}[part]()
    if not a.only or "clustering" in a.only:  # last: compilation may take long
        clustering(a.data, device, a.smoke, compiled=True)


if __name__ == "__main__":
    main()

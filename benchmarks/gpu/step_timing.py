"""Seconds per training epoch and per step on the device, measured with swarmctl's own trainer pieces
(the training loop's step, swarmctl.training.steps.TrainStep, in each mode).

(1) SWARM (192-10-1) on the real seed-0 data: one epoch = the 90 bucketed batches of 100 tasks (9,000
tasks), Adam, Hungarian-matched loss (solved on the device), batches already on the device, in each
mode: TF32 (the CUDA default), strict float32, bf16 autocast, TF32 with CUDA graphs, TF32 with the
compiled step. The validation loss of one set of weights under each numeric mode shows what it does to
the loss.
(2) swarm-mog (768-20-1): ms per step of 10 tasks drawn on the device, eager, with CUDA graphs (one per
N bucket) and with the compiled step.  (3) swarm-image (256-10-1): seconds per MNIST epoch (1,200 steps
of 50 images), extrapolated from timed steps, eager / bf16 autocast / CUDA graphs / both / compiled,
and the loss of the same weights in float32 and bf16.

With --json PATH the numbers are also written there (the session script picks each task's fastest mode).

    PYTHONPATH=. python3 benchmarks/gpu/step_timing.py DATA.h5 [--device cuda] [--smoke] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
from swarmctl.training.steps import TrainStep

RESULTS: dict[str, dict[str, float]] = {"clustering_s_per_epoch": {}, "mog_ms_per_step": {},
                                         "image_s_per_epoch": {}, "loss": {}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_epoch(step: TrainStep, batches, device) -> float:
    sync(device)
    t = time.perf_counter()
    for batch in batches:
        step(batch)
    sync(device)
    return time.perf_counter() - t


@contextlib.contextmanager
def mode_guard(what: str):
    """A mode that fails on this card is reported and skipped: the other modes keep their minutes."""
    try:
        yield
    except Exception as exc:
        print(f"  {what}: failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        RESULTS.setdefault("failed", {})[what] = f"{type(exc).__name__}: {str(exc)[:300]}"


def stepper(model, lr: float, loss_fn, device, amp: bool = False, graphs: bool = False) -> TrainStep:
    return TrainStep(model, torch.optim.Adam(model.parameters(), lr=lr), loss_fn, device, amp=amp, graphs=graphs)


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
    waited = time.monotonic() + 150
    while not os.path.isfile(data) and time.monotonic() < waited:  # the session generates it meanwhile
        time.sleep(1)
    splits, info = read_dataset(data)
    train = [b.to(device) for b in bucketed_batches(splits["train"], 100)]
    val = [b.to(device) for b in bucketed_batches(splits["val"], 100)]
    H, T = (8, 2) if smoke else (192, 10)
    # (name, tf32, amp, graphs, compiled)
    modes = [("tf32+compile", True, False, False, True)] if compiled else [
        ("tf32", True, False, False, False), ("fp32", False, False, False, False),
        ("bf16-autocast", True, True, False, False), ("tf32+graphs", True, False, True, False)]
    print(f"clustering: SWARM ({H}-{T}-1), {len(train)} batches of <= 100 tasks per epoch; data checksum "
          f"{info['checksum'][:16]}", flush=True)
    torch.manual_seed(0)
    ref = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T))
    for name, tf32, amp, graphs, compiled in modes:
        use_tf32(tf32)
        model = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T)).to(device)
        model.load_state_dict(ref.state_dict())
        if compiled:
            model.compile_steps()
        step = stepper(model, 0.01, clustering_loss, device, amp, graphs)
        first = timed_epoch(step, train, device)  # warm-up (and compilation, graph capture)
        second = timed_epoch(step, train, device)
        RESULTS["clustering_s_per_epoch"][name] = second
        print(f"  {name:<14} epoch {second:6.2f} s (first, with warm-up {first:6.2f} s)", flush=True)
    use_tf32(True)
    if compiled:
        return
    trained = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T)).to(device)
    trained.load_state_dict(ref.state_dict())
    step = stepper(trained, 0.01, clustering_loss, device)
    for _ in range(1 if smoke else 3):
        timed_epoch(step, train, device)
    losses = {}
    for name, tf32, amp in (("fp32", False, False), ("tf32", True, False), ("bf16-autocast", True, True)):
        use_tf32(tf32)
        losses[name] = val_loss(trained, val, amp, device)
    use_tf32(True)
    RESULTS["loss"]["clustering_val_same_weights"] = losses
    print("  validation loss of the same weights (3 epochs trained): "
          + ", ".join(f"{k} {v:.5f}" for k, v in losses.items()), flush=True)


def mog(device, smoke: bool) -> None:
    H, T = (8, 2) if smoke else (768, 20)
    n = 8 if smoke else 160  # the first 120 warm up: every one of the 9 buckets captured (or compiled) before timing
    batches = list(FreshBatches(n, 10, 0, 0, 0, MogParams()).on(device))  # drawn on the device, N in buckets
    modes = (("eager", False, None), ("graphs", True, None), ("compile", False, "default"),
             ("compile-reduce-overhead", False, "reduce-overhead"))
    for name, graphs, compiled in modes if device.type == "cuda" else modes[:2]:  # compiling: minutes on a CPU
        with mode_guard(f"mog {name}"):
            mog_mode(batches, n, H, T, name, graphs, compiled, device)


def mog_mode(batches, n, H, T, name, graphs, compiled, device) -> None:
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=H, n_iter=T)).to(device)
    # "compile" is what `train --compile` does for this model; reduce-overhead adds PyTorch's own graphs
    run = model if compiled is None else torch.compile(model, dynamic=compiled == "default", mode=compiled)
    step = TrainStep(run, torch.optim.Adam(model.parameters(), lr=0.01), mog_loss, device, graphs=graphs)
    warm = n // 2 if n < 100 else n - 40
    timed_epoch(step, batches[:warm], device)  # warm-up: every bucket seen (graphs captured, steps compiled)
    per_step = timed_epoch(step, batches[warm:], device) / (n - warm)
    RESULTS["mog_ms_per_step"][name] = per_step * 1e3
    print(f"mog: swarm-mog ({H}-{T}-1), 10 tasks per step, {name}: {per_step * 1e3:.2f} ms/step "
          f"({per_step * 50_000 / 60:.1f} min for the paper's 50,000 steps)", flush=True)


def image(device, smoke: bool) -> None:
    H, T = (8, 2) if smoke else (256, 10)
    gen = torch.Generator().manual_seed(0)
    batches = [ImageBatch(torch.randint(0, 256, (50, 1, 28, 28), generator=gen), torch.randint(0, 10, (50,),
                          generator=gen)).to(device) for _ in range(4 if smoke else 12)]
    modes = (("eager", False, False, False), ("bf16-autocast", True, False, False), ("graphs", False, True, False),
             ("graphs+bf16", True, True, False), ("compile", False, False, True))
    for name, amp, graphs, compiled in modes if device.type == "cuda" else modes[:3]:
        with mode_guard(f"image {name}"):
            image_mode(batches, H, T, name, amp, graphs, compiled, device)


def image_mode(batches, H, T, name, amp, graphs, compiled, device) -> None:
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-image", dim_hidden=H, n_iter=T, dataset="mnist")).to(device)
    run = torch.compile(model, dynamic=True) if compiled else model  # what `train --compile` does for it
    step = TrainStep(run, torch.optim.Adam(model.parameters(), lr=1e-3), image_loss, device, amp=amp, graphs=graphs)
    warm = len(batches) // 3
    timed_epoch(step, batches[:warm], device)
    t = timed_epoch(step, batches[warm:], device) / len(batches[warm:])
    RESULTS["image_s_per_epoch"][name] = t * 1200
    print(f"image: swarm-image ({H}-{T}-1), batch 50, {name}: {t * 1e3:.1f} ms/step, "
          f"{t * 1200:.1f} s per MNIST epoch (1,200 steps)", flush=True)
    if name == "eager":
        with torch.no_grad():
            full = image_loss(model, batches[0]).mean().item()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                half = image_loss(model, batches[0]).mean().item()
        RESULTS["loss"]["image_same_weights"] = {"fp32": full, "bf16-autocast": half}
        print(f"  loss of the same weights: fp32 {full:.5f}, bf16 autocast {half:.5f} nats "
              f"({abs(half - full) / 0.6931:.4f} bits/dim apart)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="the seed-0 clustering file")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", choices=["clustering", "mog", "image"], action="append")
    ap.add_argument("--smoke", action="store_true", help="tiny models: seconds on a CPU")
    ap.add_argument("--json", help="also write the measured numbers to this file")
    a = ap.parse_args()
    device = torch.device(a.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    RESULTS["device"] = {"name": name, "torch": torch.__version__}  # type: ignore[assignment]
    parts = a.only or ["mog", "image", "clustering"]
    calls = [{"clustering": lambda: clustering(a.data, device, a.smoke, compiled=False),
              "mog": lambda: mog(device, a.smoke), "image": lambda: image(device, a.smoke)}[part] for part in parts]
    if "clustering" in parts and device.type == "cuda":  # last: compilation may take long (minutes on a CPU)
        calls.append(lambda: clustering(a.data, device, a.smoke, compiled=True))
    for call in calls:
        with mode_guard("part"):
            call()
        if a.json:  # after each part: a timed-out run keeps what it measured
            with open(a.json, "w") as fh:
                json.dump(RESULTS, fh, indent=2)


if __name__ == "__main__":
    main()

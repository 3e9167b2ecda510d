"""Training-step throughput of swarmctl's SWARM layer against a naive baseline, side by side in one process.

Two measurements, each an Adam step with the Hungarian-matched cross-entropy of training (the
paper, sec. 4.1) on generated clustering tasks, variants alternating step by step:

1. the paper shape: SWARM (192-10-1), one batch of 100 tasks with N in 545..555 (a bucketed batch of
   the paper's data has nearly equal N; the mean N of the data is 550). Median of --repeats steps;
   seconds per 9,000-task epoch = 90 x the step.
2. an epoch of the 2,000-task seed-0 data (N 100..1000, the first 1,800 tasks for training) at
   (64-5-1): the 18 bucketed batches of 100 tasks, every variant one step per batch, summed.

Variants: "swarmctl" (the library's layer: the fused C++ kernels on the CPU), on the CPU also
"swarmctl-torch" (the same layer on its PyTorch path, SWARMCTL_NO_EXT=1), and the baseline
(--baseline, default "authors": the authors' formulation, see naive_swarm.py). Printed with them: the
machine's GEMM rate, its copy bandwidth, each variant's GEMM / non-GEMM split from one profiled step,
and for the fused layer the element-wise traffic it moves.

    python benchmarks/layer_throughput.py                      # CPU: both measurements (a few minutes)
    SWARMCTL_NO_EXT=1 python benchmarks/layer_throughput.py --device cuda --tf32 --amp  # GPU: fp32, TF32, bf16
    python benchmarks/layer_throughput.py --only paper --repeats 5 --baseline per-entity
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_swarm import BASELINES  # noqa: E402

from swarmctl.data.clustering_generator import ClusteringParams, generate_clustering  # noqa: E402
from swarmctl.data.dataset import ClusteringBatch, bucketed_batches  # noqa: E402
from swarmctl.layers import _ext  # noqa: E402
from swarmctl.layers.swarm import SwarmLayer  # noqa: E402
from swarmctl.tasks.hungarian import hungarian_ce  # noqa: E402

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
            "aten::mkldnn_convolution", "aten::convolution_backward", "aten::_convolution", "aten::conv1d")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]  # --clock cpu: the process's CPU time, which other processes sharing the cores barely move


def timed(device: torch.device, fn: Callable[[], None]) -> float:
    sync(device)
    t = clock()
    fn()
    sync(device)
    return clock() - t


def gemm_gflops(device: torch.device, m: int, k: int, n: int, reps: int = 5) -> float:
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    a @ b
    return 2 * m * k * n * reps / timed(device, lambda: [a @ b for _ in range(reps)]) / 1e9


def copy_gbps(device: torch.device, mib: int = 256, reps: int = 5) -> float:
    a = torch.empty(mib * 2**18, device=device).fill_(1.0)
    b = torch.empty_like(a)
    b.copy_(a)
    return 2 * a.numel() * 4 * reps / timed(device, lambda: [b.copy_(a) for _ in range(reps)]) / 1e9


def useful_flops(B: int, N: int, D: int, H: int, T: int, C: int) -> float:
    """GEMM FLOPs of the fast formulation's training step: forward x 3 (forward + two backward products)."""
    rows = B * N
    fwd = 2 * rows * D * 4 * H  # input projection, once
    fwd += (T - 1) * (2 * rows * H * 4 * H + 2 * B * H * 4 * H)  # recurrent per entity, population per set
    fwd += 2 * rows * 2 * H * C  # output layer
    return 3 * fwd


def fused_traffic_bytes(B: int, N: int, H: int, T: int) -> float:
    """Bytes the fused kernels read and write in one training step (float32, narrow input projected
    inside the kernels; the matrix products' own traffic not included)."""
    rows = B * N
    fwd = (4 + 1 + 1) * H + (T - 1) * (4 + 1 + 4 + 1 + 1) * H  # a, c_prev in; gates, h, c out
    bwd = T * (4 + 1 + 1 + 1 + 1 + 4 + 1) * H  # gates, c_prev, c, dh, dc in; da, dc_prev out
    return 4.0 * rows * (fwd + bwd)


@contextlib.contextmanager
def no_ext(off: bool) -> Iterator[None]:
    old = os.environ.get("SWARMCTL_NO_EXT")
    if off:
        os.environ["SWARMCTL_NO_EXT"] = "1"
    try:
        yield
    finally:
        if off:
            if old is None:
                os.environ.pop("SWARMCTL_NO_EXT", None)
            else:
                os.environ["SWARMCTL_NO_EXT"] = old


class Variant:
    """A model with its own Adam optimiser; ``step(batch)`` is one training step."""

    def __init__(self, name: str, model: torch.nn.Module, device: torch.device, torch_path: bool = False,
                 amp: bool = False, tf32: bool = False) -> None:
        self.name, self.model, self.device, self.torch_path, self.amp = name, model, device, torch_path, amp
        self.tf32 = tf32
        self.opt = torch.optim.Adam(model.parameters(), lr=0.01)
        self.times: list[float] = []

    def step(self, batch: ClusteringBatch) -> None:
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.tf32
        with no_ext(self.torch_path), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            self.opt.zero_grad(set_to_none=True)
            logits = self.model(batch.x, batch.mask)
            hungarian_ce(logits.float(), batch.labels, batch.mask).loss.backward()
        self.opt.step()

    def timed_step(self, batch: ClusteringBatch) -> float:
        return timed(self.device, lambda: self.step(batch))

    def gemm_share(self, batch: ClusteringBatch) -> float:
        """Fraction of one step's CPU self time spent in matrix products (torch profiler)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            self.step(batch)
        total = gemm = 0.0
        for ev in prof.key_averages():
            total += ev.self_cpu_time_total
            if ev.key in GEMM_OPS:
                gemm += ev.self_cpu_time_total
        return gemm / total if total else float("nan")


def make_variants(args, device: torch.device, H: int, T: int) -> list[Variant]:
    torch.manual_seed(0)
    lib = SwarmLayer(2, H, 10, T).to(device)
    base = BASELINES[args.baseline](2, H, 10, T).load_from(lib).to(device)
    out = [Variant("swarmctl", lib, device)]
    if device.type == "cpu":
        twin = SwarmLayer(2, H, 10, T).to(device)
        twin.load_state_dict(lib.state_dict())
        out.append(Variant("swarmctl-torch", twin, device, torch_path=True))
    out.append(Variant(f"naive-{args.baseline}", base, device))
    for flag, suffix in ((args.tf32, "+tf32"), (args.amp, "+bf16")):
        if not flag:
            continue
        for v in [v for v in out if not (v.amp or v.tf32)]:
            clone = type(v.model)(2, H, 10, T).to(device)
            clone.load_state_dict(v.model.state_dict())
            out.append(Variant(v.name + suffix, clone, device, v.torch_path, amp=suffix == "+bf16",
                               tf32=suffix == "+tf32"))
    if args.compile:
        comp = SwarmLayer(2, H, 10, T).to(device)
        comp.load_state_dict(lib.state_dict())
        comp.compile_step()
        out.append(Variant("swarmctl+compile", comp, device))
    return out


def check_same_function(variants: list[Variant], batch: ClusteringBatch) -> float:
    """Largest output difference of the fp32 variants on one batch (they hold the same weights)."""
    with torch.no_grad():
        outs = []
        for v in variants:
            if not (v.amp or v.tf32):
                with no_ext(v.torch_path):
                    outs.append(v.model(batch.x, batch.mask)[batch.mask])
    return max((o - outs[0]).abs().max().item() for o in outs)


def tasks_batches(params: ClusteringParams, seed: int, device: torch.device, n_train: int | None = None):
    tasks = generate_clustering(params, seed)
    if n_train is not None:
        tasks = tasks.select(slice(0, n_train))
    return [b.to(device) for b in bucketed_batches(tasks, 100)]


def report(variants: list[Variant], base_name: str, flops: float, per_epoch: float, unit: str,
           shares: dict[str, float]) -> None:
    base = statistics.median(next(v for v in variants if v.name == base_name).times) * per_epoch
    print(f"  {'variant':<26} {unit:>12} {'s/epoch':>9} {'vs naive':>9} {'useful TFLOP/s':>15} {'GEMM share':>11}")
    for v in variants:
        med = statistics.median(v.times) * per_epoch
        share = shares.get(v.name)
        share_s = f"{100 * share:>10.0f}%" if share is not None else f"{'-':>11}"
        print(f"  {v.name:<26} {med / per_epoch:>12.4f} {med:>9.2f} {base / med:>8.2f}x "
              f"{flops * per_epoch / med / 1e12:>15.3f} {share_s}")


def paper_shape(args, device: torch.device) -> None:
    H, T = 192, 10
    n = max(2, args.sets)
    batch = tasks_batches(ClusteringParams(n_tasks=n, val_fraction=0.5, n_min=545, n_max=555), 0, device)[0]
    batch = ClusteringBatch(*(t[: args.sets] for t in (batch.x, batch.labels, batch.mask, batch.index)))
    variants = make_variants(args, device, H, T)
    B, N = batch.x.shape[:2]
    print(f"\n[paper shape] SWARM (192-10-1), {B} tasks padded to N={N} (N 545..555), Adam lr 0.01, "
          f"Hungarian loss; median of {args.repeats} steps after 2 warm-up steps; epoch = {9000 // B} steps "
          "(9,000 tasks)")
    print(f"  max |output difference| between the fp32 variants: {check_same_function(variants, batch):.2e}")
    for v in variants:
        v.step(batch)
        v.step(batch)
    for _ in range(args.repeats):
        for v in variants:
            v.times.append(v.timed_step(batch))
    shares = {v.name: v.gemm_share(batch) for v in variants} if args.profile and device.type == "cpu" else {}
    per_epoch = 9000 / B
    report(variants, f"naive-{args.baseline}", useful_flops(B, N, 2, H, T, 10), per_epoch, "s/step", shares)
    fused = next(v for v in variants if v.name == "swarmctl")
    if device.type == "cpu" and "swarmctl" in shares and _ext.kernels() is not None:
        step = statistics.median(fused.times)
        non_gemm = step * (1 - shares["swarmctl"])
        gb = fused_traffic_bytes(B, N, H, T) / 1e9
        print(f"  swarmctl: fused kernels move {gb:.2f} GB per step; non-GEMM time {non_gemm:.2f} s "
              f"-> at most {gb / non_gemm:.1f} GB/s of element-wise traffic")


def small_epoch(args, device: torch.device) -> None:
    H, T = 64, 5
    t0 = time.perf_counter()
    batches = tasks_batches(ClusteringParams(n_tasks=2000), 0, device, n_train=1800)
    gen = time.perf_counter() - t0
    variants = make_variants(args, device, H, T)
    sizes = [int(b.mask.sum(1).max()) for b in batches]
    print(f"\n[(64-5-1) epoch] the 2,000-task seed-0 data (generated in {gen:.1f} s): {len(batches)} bucketed "
          f"batches of 100 tasks (N {min(sizes)}..{max(sizes)}), one Adam step each, variants alternating")
    for v in variants:  # warm-up on the largest and smallest batch
        v.step(batches[-1])
        v.step(batches[0])
    for v in variants:
        v.times = [0.0]
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0)).tolist()
    for i in order:
        for v in variants:
            v.times[0] += v.timed_step(batches[i])
    rows = sum(b.x.shape[0] * b.x.shape[1] for b in batches)
    flops = useful_flops(1, rows, 2, H, T, 10)
    profile = args.profile and device.type == "cpu"
    shares = {v.name: v.gemm_share(batches[order[0]]) for v in variants} if profile else {}
    base = f"naive-{args.baseline}"
    print(f"  {'variant':<26} {'s/epoch':>9} {'vs naive':>9} {'useful TFLOP/s':>15} {'GEMM share':>11}")
    b_time = next(v for v in variants if v.name == base).times[0]
    for v in variants:
        share = shares.get(v.name)
        share_s = f"{100 * share:>10.0f}%" if share is not None else f"{'-':>11}"
        print(f"  {v.name:<26} {v.times[0]:>9.2f} {b_time / v.times[0]:>8.2f}x {flops / v.times[0] / 1e12:>15.3f} "
              f"{share_s}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--only", choices=("paper", "epoch"), help="run one of the two measurements")
    ap.add_argument("--baseline", choices=tuple(BASELINES), default="authors")
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per variant at the paper shape")
    ap.add_argument("--sets", type=int, default=100, help="tasks in the paper-shape batch (default 100)")
    ap.add_argument("--amp", action="store_true", help="also time every variant under bf16 autocast")
    ap.add_argument("--tf32", action="store_true", help="also time every variant with TF32 matrix products (CUDA)")
    ap.add_argument("--compile", action="store_true", help="also time the layer with a torch.compile'd step")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the profiled GEMM share (CPU only; never profiled on CUDA)")
    ap.add_argument("--clock", choices=tuple(CLOCK), default="wall",
                    help="wall (default) or cpu: the process's CPU time, for a CPU shared with other work")
    args = ap.parse_args()
    global clock
    clock = CLOCK[args.clock]
    if args.clock == "cpu" and args.device != "cpu":
        sys.exit("--clock cpu measures the CPU only; use --clock wall with --device cuda")

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: no CUDA device visible; use --device cpu")
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
    t_start = time.perf_counter()
    load = os.getloadavg()
    ext = _ext.kernels() if device.type == "cpu" else None
    print(f"device: {device.type} ({name}), torch {torch.__version__}, python {platform.python_version()}, "
          f"threads {torch.get_num_threads()}, cpus {os.cpu_count()}, load average {load[0]:.1f} at start, "
          f"{args.clock} clock")
    if device.type == "cpu":
        print(f"fused kernels: {ext.path if ext else 'unavailable (PyTorch path)'}")
    else:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        print("matrix products in fp32 (rows marked +tf32 allow TF32, +bf16 run under bf16 autocast)")
    print(f"GEMM: 2048^3 {gemm_gflops(device, 2048, 2048, 2048):.1f} GFLOP/s; SWARM's recurrent product "
          f"(55,000 x 192 x 768) {gemm_gflops(device, 55000, 192, 768):.1f} GFLOP/s; "
          f"copy bandwidth {copy_gbps(device):.1f} GB/s")
    if args.only in (None, "paper"):
        paper_shape(args, device)
    if args.only in (None, "epoch"):
        small_epoch(args, device)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s; load average {os.getloadavg()[0]:.1f} at the end "
          f"(above {os.cpu_count()} means other work shared the machine)")


if __name__ == "__main__":
    main()

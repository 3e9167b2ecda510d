"""How often swarm-mog training goes non-finite, per setting: width, pooling, learning rate, the precision of
the matrix products and the batch layout; N steps per (setting, seed), through the library (not the CLI).

    python benchmarks/mog_divergence.py --models 64-5,128-10 --lrs 0.01,0.05 --precisions fp32,tf32 \\
        --seeds 0-3 --steps 500 [--pooling mean,causal] [--layouts host,padded] [--json out.json]

Each step draws 10 fresh tasks as training does (`FreshBatches`: the host's NumPy sampler, unpadded, or with
`--layouts padded` the device sampler run on the CPU, N padded to a bucket of 50 as on a card), computes the
loss with the task's own `mixture_parameters` and `mixture_log_likelihood`, and steps Adam. The first step whose
loss or gradient is not finite ends that seed's run; the script then names what went non-finite first (the
model's raw output, a standard deviation of zero, a component's log-density, the per-point log-likelihood, or
only the gradient) and repeats the failing step in float64 from the same weights and batch.

Precisions: ``fp32`` (the CPU's float32; the fused C++ kernels where they run), ``tf32`` (float32 with the inputs
of every matrix product, and the gradient flowing into it, rounded to TF32's 10-bit mantissa: what a card's
TF32 tensor cores do; the layer's PyTorch path), ``bf16`` (bfloat16 autocast, as `--step amp`) and ``fp64``.
With ``--device cuda`` the card computes them itself: ``fp32`` with TF32 off, ``tf32`` with it on.
``--min-std 0`` removes the floor on the predicted standard deviations (what the library did before it had one).
The result is a markdown table of divergence rates with the median first bad step and gradient norms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from swarmctl.config import ModelConfig
from swarmctl.data.mog import FreshBatches, MogBatch, MogParams, sample_mog_batch_torch
from swarmctl.layers import _fused
from swarmctl.models import create_model
from swarmctl.models import mog as mog_models
from swarmctl.models.mog import mixture_parameters
from swarmctl.tasks.mog import mixture_log_likelihood
from swarmctl.training.device import use_tf32

BATCH = 10  # tasks per step, the paper's
CPU = torch.device("cpu")


def round_tf32(t: Tensor) -> Tensor:
    """float32 rounded to the nearest value with a 10-bit mantissa (TF32), float32 range kept."""
    i = t.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


class _RoundIn(torch.autograd.Function):
    """Forward: round to TF32; backward: the gradient unchanged (the product's own backward rounds)."""

    @staticmethod
    def forward(ctx: Any, t: Tensor) -> Tensor:
        return round_tf32(t)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g


class _RoundGradOut(torch.autograd.Function):
    """Forward: unchanged; backward: the gradient entering the product's backward rounded to TF32."""

    @staticmethod
    def forward(ctx: Any, t: Tensor) -> Tensor:
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return round_tf32(g)


_PRODUCTS = {F.linear: (0, 1), torch.addmm: (1, 2), torch.bmm: (0, 1), torch.matmul: (0, 1), torch.mm: (0, 1),
             Tensor.matmul: (0, 1), Tensor.__matmul__: (0, 1), Tensor.mm: (0, 1), Tensor.bmm: (0, 1)}


class TF32Products(TorchFunctionMode):
    """Every float32 matrix product runs on TF32-rounded inputs, forward and backward (accumulation float32)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        which = _PRODUCTS.get(func)
        if which is None:
            return func(*args, **kwargs)
        args = list(args)
        for k in which:
            if isinstance(args[k], Tensor) and args[k].dtype == torch.float32:
                args[k] = _RoundIn.apply(args[k])
        out = func(*args, **kwargs)
        return _RoundGradOut.apply(out) if out.requires_grad else out


@contextlib.contextmanager
def precision(name: str, device: torch.device) -> Iterator[None]:
    if device.type == "cuda":  # the card's own arithmetic: TF32 tensor cores on or off, bf16 autocast
        before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        use_tf32(name == "tf32")
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=name == "bf16"):
                yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    elif name in ("fp32", "fp64"):
        yield
    elif name == "tf32":
        real = _fused.usable_kernels
        _fused.usable_kernels = lambda *a, **k: None  # the C++ kernels do their own products: the PyTorch path
        try:
            with TF32Products():
                yield
        finally:
            _fused.usable_kernels = real
    elif name == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    else:
        raise SystemExit(f"unknown precision {name!r}; use fp32, tf32, bf16 or fp64")


@dataclass
class Outcome:
    bad_step: int | None = None  # the first step with a non-finite loss or gradient
    first: str = ""  # what went non-finite first
    fp64_finite: bool | None = None  # the failing step again in float64 from the same weights
    grad_norms: list[float] = field(default_factory=list)  # every step's gradient norm (before the update)
    min_std: float = math.inf  # smallest predicted standard deviation over the run
    max_raw: float = 0.0  # largest |raw output| over the run
    loss_tail: list[float] = field(default_factory=list)
    seconds: float = 0.0


def batch_at(layout: str, seed: int, i: int, n_steps: int, device: torch.device = CPU) -> MogBatch:
    if layout == "host":
        return FreshBatches(n_steps, BATCH, seed, 0, 0, MogParams())[i].to(device)
    rng = np.random.default_rng([seed, 0, 0, i])
    return sample_mog_batch_torch(rng, BATCH, MogParams(), device)


def forward_parts(model: torch.nn.Module, b: MogBatch, dtype: torch.dtype) -> dict[str, Tensor]:
    raw = model(b.x.to(dtype), b.mask).to(dtype if dtype == torch.float64 else torch.float32)
    means, stds, log_w = mixture_parameters(raw)
    x = b.x.to(raw.dtype)
    z = (x.unsqueeze(2) - means.unsqueeze(1)) / stds.unsqueeze(1)
    comp = (-0.5 * z.square() - torch.log(stds).unsqueeze(1) - 0.5 * math.log(2 * math.pi)).sum(-1)
    ll = mixture_log_likelihood(x, b.mask, means, stds, log_w)
    return {"raw": raw, "stds": stds, "comp": comp[b.mask], "ll": ll}


def first_nonfinite(parts: dict[str, Tensor]) -> str:
    if not torch.isfinite(parts["raw"]).all():
        return "model output"
    if (parts["stds"] == 0).any():
        return f"std = 0 (softplus underflow, raw {parts['raw'][..., 2:4].min().item():.3g})"
    if not torch.isfinite(parts["comp"]).all():
        return f"component log-density (min std {parts['stds'].min().item():.3g})"
    if not torch.isfinite(parts["ll"]).all():
        return "mixture log-likelihood"
    return f"gradient only (min std {parts['stds'].min().item():.3g})"


def train_one(model_cfg: ModelConfig, lr: float, prec: str, layout: str, seed: int, steps: int,
              device: torch.device = CPU) -> Outcome:
    torch.manual_seed(seed)
    model = create_model(model_cfg)
    dtype = torch.float64 if prec == "fp64" else torch.float32
    model.to(device, dtype).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = Outcome()
    t0 = time.perf_counter()
    for i in range(steps):
        b = batch_at(layout, seed, i, steps, device)
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with precision(prec, device):
            parts = forward_parts(model, b, dtype)
        loss = -parts["ll"].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads])).item()
        out.grad_norms.append(norm)
        with torch.no_grad():
            if torch.isfinite(parts["stds"]).all():
                out.min_std = min(out.min_std, parts["stds"].min().item())
            if torch.isfinite(parts["raw"]).all():
                out.max_raw = max(out.max_raw, parts["raw"].abs().max().item())
        out.loss_tail = (out.loss_tail + [loss.item()])[-5:]
        if not (math.isfinite(loss.item()) and math.isfinite(norm)):
            out.bad_step = i
            out.first = first_nonfinite({k: v.detach() for k, v in parts.items()})
            out.fp64_finite = _finite_in_fp64(model_cfg, before, b)
            break
        opt.step()
    out.seconds = time.perf_counter() - t0
    return out


def _finite_in_fp64(model_cfg: ModelConfig, state: dict[str, Tensor], b: MogBatch) -> bool:
    m = create_model(model_cfg).to(b.x.device, torch.float64)
    m.load_state_dict({k: v.double() for k, v in state.items()})
    parts = forward_parts(m, b, torch.float64)
    loss = -parts["ll"].mean()
    loss.backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    return math.isfinite(loss.item()) and all(torch.isfinite(g).all() for g in grads)


def output_steps(model_cfg: ModelConfig, lr: float, steps: int, seed: int = 0) -> list[float]:
    """How far each of the first ``steps`` Adam steps moves the predicted standard deviations' logits: the largest
    change, over a fixed probe batch, of the raw std outputs (before softplus) from one step."""
    torch.manual_seed(seed)
    model = create_model(model_cfg).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    probe = batch_at("host", seed + 1000, 0, 1)
    moves = []
    for i in range(steps):
        with torch.no_grad():
            before = model(probe.x, probe.mask)[..., 2:4]
        parts = forward_parts(model, batch_at("host", seed, i, steps), torch.float32)
        opt.zero_grad(set_to_none=True)
        (-parts["ll"].mean()).backward()
        opt.step()
        with torch.no_grad():
            moves.append((model(probe.x, probe.mask)[..., 2:4] - before).abs().max().item())
    return moves


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="64-5", help="HIDDEN-ITERS, comma-separated")
    ap.add_argument("--pooling", default="mean", help="mean, causal or both (comma-separated)")
    ap.add_argument("--lrs", default="0.01")
    ap.add_argument("--precisions", default="fp32", help="fp32, tf32, bf16, fp64 (comma-separated)")
    ap.add_argument("--layouts", default="host", help="host (NumPy, unpadded) and/or padded (device sampler)")
    ap.add_argument("--seeds", default="0-3", help="a range A-B or a comma-separated list")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: the card's own TF32 / float32 / bf16")
    ap.add_argument("--json", type=Path, default=None, help="append each (setting, seed) as a JSON line here")
    ap.add_argument("--min-std", type=float, default=None,
                    help="the floor on predicted standard deviations (default: the library's; 0: none, as before)")
    ap.add_argument("--output-steps", type=int, default=0,
                    help="instead: per model and lr, how far each of the first N Adam steps moves the std logits")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    device = torch.device(args.device)
    if args.min_std is not None:
        mog_models.MIN_STD = args.min_std  # read by mixture_parameters at every call
    if args.output_steps:
        print("| model | lr | largest change of a std logit per Adam step (median, max over the first steps) |")
        print("|---|---|---|")
        for code in args.models.split(","):
            hidden, iters = (int(v) for v in code.split("-"))
            cfg = ModelConfig(name="swarm-mog", dim_hidden=hidden, n_iter=iters, pooling=args.pooling.split(",")[0])
            for lr in (float(v) for v in args.lrs.split(",")):
                moves = output_steps(cfg, lr, args.output_steps)
                print(f"| {hidden}-{iters}-1 | {lr:g} | {statistics.median(moves):.3g}, {max(moves):.3g} |", flush=True)
        return
    rows = []
    for code in args.models.split(","):
        hidden, iters = (int(v) for v in code.split("-"))
        for pooling in args.pooling.split(","):
            cfg = ModelConfig(name="swarm-mog", dim_hidden=hidden, n_iter=iters, pooling=pooling)
            for lr in (float(v) for v in args.lrs.split(",")):
                for prec in args.precisions.split(","):
                    for layout in args.layouts.split(","):
                        outs = []
                        for seed in seeds:
                            o = train_one(cfg, lr, prec, layout, seed, args.steps, device)
                            outs.append(o)
                            line = {"model": f"{hidden}-{iters}-1", "pooling": pooling, "lr": lr, "precision": prec,
                                    "layout": layout, "seed": seed, "steps": args.steps,
                                    "std_floor": mog_models.MIN_STD, "bad_step": o.bad_step,
                                    "first": o.first, "fp64_finite": o.fp64_finite, "min_std": o.min_std,
                                    "max_raw": o.max_raw, "max_grad_norm": max(o.grad_norms),
                                    "median_grad_norm": statistics.median(o.grad_norms),
                                    "grad_norms_before": o.grad_norms[-6:-1], "loss_tail": o.loss_tail,
                                    "seconds": round(o.seconds, 1)}
                            print(json.dumps(line), flush=True)
                            if args.json:
                                with args.json.open("a") as fh:
                                    fh.write(json.dumps(line) + "\n")
                        rows.append((f"{hidden}-{iters}-1", pooling, lr, prec, layout, outs))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.machine()} CPU"
    print(f"\n{where}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.steps} steps of {BATCH} fresh tasks per seed, seeds {args.seeds}; std floor {mog_models.MIN_STD:g}\n")
    print("| model | pooling | lr | precision | layout | diverged | first bad steps | smallest std | "
          "median / max grad norm | final loss | what went non-finite first |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for code, pooling, lr, prec, layout, outs in rows:
        bad = [o for o in outs if o.bad_step is not None]
        steps = ", ".join(str(o.bad_step) for o in bad) or "-"
        firsts = "; ".join(sorted({o.first.split(" (")[0] for o in bad})) or "-"
        med = statistics.median(statistics.median(o.grad_norms) for o in outs)
        mx = max(max(o.grad_norms) for o in outs)
        done = [statistics.mean(o.loss_tail) for o in outs if o.bad_step is None]
        final = f"{statistics.median(done):.3g}" if done else "-"
        print(f"| {code} | {pooling} | {lr:g} | {prec} | {layout} | {len(bad)}/{len(outs)} | {steps} | "
              f"{min(o.min_std for o in outs):.3g} | {med:.3g} / {mx:.3g} | {final} | {firsts} |")


if __name__ == "__main__":
    main()

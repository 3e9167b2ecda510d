"""TF32 on CUDA, seeding, and the distributed (torchrun) context."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from swarmctl.errors import ResourceError


def use_tf32(enabled: bool) -> None:
    """TF32 for float32 matrix products and convolutions on CUDA (no effect on the CPU). Measured on an
    H200 it keeps the loss within noise of strict float32 (benchmarks/RESULTS.md), so it is the default."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def tf32_trains(device: torch.device) -> bool:
    """Whether a run on ``device`` trains with TF32 products (:func:`tf32_scope`): on CUDA, unless the
    environment sets SWARMCTL_NO_TF32=1."""
    return device.type == "cuda" and os.environ.get("SWARMCTL_NO_TF32", "") not in ("1", "true", "yes")


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """TF32 on or off inside this block; the settings from before are restored on leaving, so a run in a longer
    process (a notebook, a test session) leaves them as it found them."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    use_tf32(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def tf32_scope(device: torch.device) -> AbstractContextManager:
    """On CUDA, float32 matrix products use TF32 tensor cores (10-bit mantissa, float32 range and storage)
    inside this block unless the environment sets SWARMCTL_NO_TF32=1. Nothing changes on other devices."""
    return _tf32(tf32_trains(device)) if device.type == "cuda" else nullcontext()


@contextmanager
def full_precision() -> Iterator[None]:
    """Strict float32 inside this block, whatever the process or the run's step mode set: TF32 off for CUDA
    matrix products and convolutions, and autocast off on CUDA and the CPU. Reported numbers (`swarmctl eval`)
    are scored inside it.

    TF32 is switched through the same two flags as :func:`tf32_scope` (``allow_tf32``), not through
    ``torch.set_float32_matmul_precision``: PyTorch refuses to read a precision set through both."""
    with _tf32(False), torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
        yield


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class DistContext:
    """Rank and world size; world 1 when not launched by torchrun."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device_name: str = "auto") -> DistContext:
    """Join the process group torchrun set up through its environment variables (nothing otherwise)."""
    world = _env_int("WORLD_SIZE", 1, low=1)
    if world <= 1:
        return DistContext()
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ResourceError(f"WORLD_SIZE={world} is set but {', '.join(missing)} {verb} "
                          "not; launch with `torchrun --nproc_per_node=N -m swarmctl ...`, which sets them all, or "
                          "unset WORLD_SIZE")
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if rank >= world:
        raise ResourceError(f"RANK={rank} is not below WORLD_SIZE={world}; launch with torchrun, or unset both")
    if not dist.is_initialized():
        use_cuda = device_name != "cpu" and torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistContext(rank, world, local_rank)


def is_main_process() -> bool:
    """Rank 0 of a torchrun launch, or a process not launched by torchrun (reads RANK, as torchrun sets it).
    A RANK that is not an integer >= 0 is a ResourceError (exit 1: the environment is no option)."""
    return _env_int("RANK", 0) == 0


def _env_int(name: str, default: int, low: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset); ResourceError when it is not an
    integer >= ``low``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < low:
        raise ResourceError(f"the environment variable {name}={raw!r} is not an integer >= {low}; unset it, or launch "
                          "with torchrun, which sets it")
    return value


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()

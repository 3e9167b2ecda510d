"""Devices, seeding, and the distributed (torchrun) context."""

from __future__ import annotations

import ctypes
import os
import random
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from swarmctl.errors import ConfigError


def resolve_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA (this process's local rank) when available, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device cuda requested but CUDA is not available; use --device cpu or auto")
        if name == "cuda":
            name = f"cuda:{local_rank}"
    return torch.device(name)


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
    """Join the process group torchrun set up through its environment variables (nothing otherwise).

    Uses NCCL for CUDA devices and gloo for the CPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        use_cuda = device_name != "cpu" and torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistContext(rank, world, local_rank)


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to serve every block from its heap and never give freed memory back to the OS.

    Large CPU tensors are otherwise mapped fresh and unmapped on free, so each one costs page faults on
    first touch; a training step that allocates many (B, N, 4H) activations spends much of its time there.
    Returns False (and changes nothing) where glibc is not the allocator.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def barrier(ctx: DistContext) -> None:
    """Wait for every rank (nothing without a process group)."""
    if ctx.enabled:
        dist.barrier()

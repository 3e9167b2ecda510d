"""Which device a command runs on, and how much memory its up-front checks allow there (below the
trainer and the studies, which both ask)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from swarmctl.config import check_device, host_memory
from swarmctl.errors import ResourceError


def resolve_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA (this process's local rank) when available, else the CPU.

    Changes no global setting: training turns TF32 on for its own duration
    (:func:`swarmctl.training.device.tf32_scope`).
    """
    check_device(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ResourceError("device cuda requested but CUDA is not available; use `device` cpu or auto")
        if name == "cuda":
            name = f"cuda:{local_rank}"
    return torch.device(name)


def memory_limit(device: torch.device) -> int:
    """Bytes of memory the up-front checks allow on ``device``: the GPU's memory, or the machine's."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return host_memory()


def cpu_model() -> str:
    """This machine's processor as the kernel names it ("Intel(R) Xeon(R) Processor"), for records and
    benchmarks; the architecture where the kernel does not say."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

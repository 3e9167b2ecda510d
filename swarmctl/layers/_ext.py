"""Loader of the fused SWARM kernels (``_swarm_kernels.cpp``): compiled at first use, cached, optional.

The source is a plain C-ABI file without torch headers, so one compiler call of about a second builds
it; the library is cached under ``$SWARMCTL_CACHE`` (default ``~/.cache/swarmctl``) by a hash of the
source, the compiler, its flags and the CPU, and loaded with ctypes. Where no compiler is present or
the build fails, :func:`kernels` returns None once and for all, the layer uses its PyTorch code, and
one warning goes to the log. ``SWARMCTL_NO_EXT=1`` switches the kernels off (GPU jobs set it so that
no device time is spent compiling). Nothing is compiled at import time.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_swarm_kernels.cpp")
ABI_VERSION = 4
# Tried in order: the first set that builds wins (no -march=native where the compiler rejects it,
# no OpenMP where it has none: the kernels then run on one thread).
FLAG_SETS = (
    ["-O3", "-march=native", "-fopenmp"],
    ["-O3", "-fopenmp"],
    ["-O3", "-march=native"],
    ["-O3"],
)
COMMON_FLAGS = ["-shared", "-fPIC", "-std=c++17"]

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": Kernels | None once resolved


def disabled() -> bool:
    """True when ``SWARMCTL_NO_EXT`` is set to anything but '' or '0'."""
    return os.environ.get("SWARMCTL_NO_EXT", "") not in ("", "0")


def cache_dir() -> Path:
    root = os.environ.get("SWARMCTL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swarmctl")
    return Path(root) / "ext"


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _build(cxx: str) -> Path:
    """Compile the source into the cache (atomically: concurrent processes may build the same file)."""
    src = SOURCE.read_bytes()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(
            b"\0".join([src, version.encode(), " ".join(flags + COMMON_FLAGS).encode(), _cpu_signature().encode(),
                        platform.machine().encode()])
        ).hexdigest()[:16]
        target = cache_dir() / f"swarm_kernels-{key}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            proc = subprocess.run([cxx, *flags, *COMMON_FLAGS, str(SOURCE), "-o", tmp],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                os.replace(tmp, target)
                return target
            errors.append(proc.stderr.strip().splitlines()[-1:] or ["exit code " + str(proc.returncode)])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError("; ".join(e[0] for e in errors))


class Kernels:
    """ctypes bindings of the fused forward and backward (float32 and float64, contiguous CPU tensors).

    Shapes: rows R = sets x rows_per_set, G = 4H gate values per row; see ``_swarm_kernels.cpp``.
    """

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        if lib.swarm_abi_version() != ABI_VERSION:
            raise RuntimeError(f"{path} has another ABI version")
        i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        self._fwd = {torch.float32: lib.swarm_forward_f32, torch.float64: lib.swarm_forward_f64}
        self._bwd = {torch.float32: lib.swarm_backward_f32, torch.float64: lib.swarm_backward_f64}
        for f in self._fwd.values():
            f.argtypes = [i64, i64, i64] + [ptr] * 6 + [i64] + [ptr] * 4 + [i32]
            f.restype = None
        for f in self._bwd.values():
            f.argtypes = [i64, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, ptr, i64, ptr, ptr, i64] + [ptr] * 7 + [i32]
            f.restype = None
        self.path = path

    @staticmethod
    def supports(t: Tensor) -> bool:
        return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)

    def forward(self, gates: Tensor, h: Tensor, c: Tensor, *, a: Tensor | None = None, b: Tensor | None = None,
                x: Tensor | None = None, wxT: Tensor | None = None, bias: Tensor | None = None,
                p: Tensor | None = None, rows_per_set: int = 1, c_prev: Tensor | None = None) -> None:
        """gates = act(a + b + bias + x wxT + p[set]) (each term optional; a may be gates itself),
        c = f c_prev + i g (c_prev None = zero state), h = o tanh(c).

        gates, a, b: R x G; x: R x D; wxT: D x G; bias: G; p: sets x G; h, c, c_prev: R x H.
        """
        rows, G = gates.shape
        D = 0 if x is None else x.shape[1]
        self._fwd[gates.dtype](rows, G // 4, D, _p(a), _p(b), _p(x), _p(wxT), _p(bias), _p(p), rows_per_set,
                               _p(gates), _p(c_prev), _p(h), _p(c), _threads(gates))

    def backward(self, gates: Tensor, da: Tensor, c_new: Tensor, *, c_prev: Tensor | None = None,
                 dh: tuple[Tensor, int] | None = None, dc: tuple[Tensor, int] | None = None,
                 dpool: Tensor | None = None, weights: Tensor | None = None, rows_per_set: int = 1,
                 dc_prev: Tensor | None = None, dp: Tensor | None = None, x: Tensor | None = None,
                 wxT: Tensor | None = None, dwxT: Tensor | None = None, db: Tensor | None = None,
                 dx: Tensor | None = None) -> None:
        """Write the gate gradient ``da`` (may be ``gates``), ``dc_prev`` and the per-set sums ``dp`` of da.

        ``dh``, ``dc``: (tensor, row stride) pairs. ``dpool`` (sets x H) adds ``weights[row] * dpool[set]``
        to dh (mean pooling's backward; weights None = 1 / rows_per_set). With ``x``: ``dwxT``, ``db``
        and ``dx`` (if given) accumulate the gradients of the input projection x wxT + bias.
        """
        rows, G = gates.shape
        D = 0 if x is None else x.shape[1]
        dh_t, ld_dh = dh if dh is not None else (None, 0)
        dc_t, ld_dc = dc if dc is not None else (None, 0)
        self._bwd[gates.dtype](rows, G // 4, D, _p(gates), _p(da), _p(c_prev), _p(c_new), _p(dh_t, strided=True), ld_dh,
                               _p(dc_t, strided=True), ld_dc, _p(dpool), _p(weights), rows_per_set, _p(dc_prev),
                               _p(dp), _p(x), _p(wxT), _p(dwxT), _p(db), _p(dx), _threads(gates))


PARALLEL_MIN = 1 << 16  # gate values below which one thread is faster than waking the others


def _threads(gates: Tensor) -> int:
    return 1 if gates.numel() < PARALLEL_MIN else torch.get_num_threads()


def _p(t: Tensor | None, strided: bool = False) -> int | None:
    if t is None:
        return None
    if not strided and not t.is_contiguous():
        raise ValueError("fused SWARM kernels need contiguous tensors")
    return t.data_ptr()


def kernels() -> Kernels | None:
    """The compiled kernels, or None where they are switched off or cannot be built (logged once)."""
    if disabled():
        return None
    with _lock:
        if "lib" not in _state:
            _state["lib"] = _load()
    return _state["lib"]  # type: ignore[return-value]


def _load() -> Kernels | None:
    cxx = _compiler()
    if cxx is None:
        log.warning("no C++ compiler found: the SWARM layer uses its PyTorch code on the CPU "
                    "(install g++ for the fused kernels, or set SWARMCTL_NO_EXT=1 to silence this)")
        return None
    try:
        return Kernels(_build(cxx))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        log.warning("fused SWARM kernels unavailable (%s): the SWARM layer uses its PyTorch code on the CPU", e)
        return None

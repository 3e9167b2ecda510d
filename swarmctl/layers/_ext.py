"""Loader of the fused SWARM kernels (``_swarm_kernels.cpp``, a plain C ABI without torch headers): compiled
at first use into a cache keyed by a hash of the source, the compiler, its flags and the CPU, loaded with
ctypes, checked before use; :func:`kernels` returns None after one warning where they cannot be built.
docs/design.md, "The fused CPU kernels", describes the cache and its guarantees.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import torch
from torch import Tensor

from swarmctl.errors import SwarmctlError
from swarmctl.files import atomic_write_file, private_temp_folder, remove_orphan_temps

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_swarm_kernels.cpp")
ABI_VERSION = 4
SYMBOLS = ("swarm_abi_version", "swarm_forward_f32", "swarm_forward_f64", "swarm_backward_f32",
           "swarm_backward_f64")
# Tried in order: the first set that builds wins (no -march=native where the compiler rejects it,
# no OpenMP where it has none: the kernels then run on one thread).
FLAG_SETS = (
    ["-O3", "-march=native", "-fopenmp"],
    ["-O3", "-fopenmp"],
    ["-O3", "-march=native"],
    ["-O3"],
)
COMMON_FLAGS = ["-shared", "-fPIC", "-std=c++17"]
PREFIX = "swarm_kernels-"
COMPILE_TIMEOUT_S = 300

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": Kernels | None once resolved; "error": why None


class BadLibrary(RuntimeError):
    """A file that is not a loadable kernel library of this ABI version."""


def disabled() -> bool:
    return os.environ.get("SWARMCTL_NO_EXT", "") not in ("", "0")


def cache_dir() -> Path:
    """The configured cache folder: ``$SWARMCTL_CACHE/ext``, default ``~/.cache/swarmctl/ext``."""
    root = os.environ.get("SWARMCTL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swarmctl")
    return Path(root) / "ext"


def unavailable_reason() -> str | None:
    """Why :func:`kernels` returned None in this process (None if it did not, or was not called)."""
    return _state.get("error")  # type: ignore[return-value]


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def library_name(src: bytes, version: str, flags: list[str]) -> str:
    """The cache file name of a build: a hash of everything that changes the library."""
    try:
        cpu = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith(("flags", "Feat"))),
                   "")
    except OSError:
        cpu = platform.processor()
    key = hashlib.sha256(b"\0".join(part.encode() if isinstance(part, str) else part for part in (
        src, version, " ".join(flags + COMMON_FLAGS), cpu, platform.machine()))).hexdigest()[:16]
    return f"{PREFIX}{key}.so"


def _check_complete(path: Path | str) -> None:
    """:class:`BadLibrary` where an ELF file is shorter than its headers say (a truncated copy): the dynamic
    loader maps the pages its segments name and the process dies of SIGBUS when it touches the missing ones.
    Files that are not ELF go to the loader, which refuses them with an error."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:  # the loader says why
        return
    if data[:4] != b"\x7fELF" or len(data) < 6 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    header = f"{end}24x8xQQ6xHHHH" if wide else f"{end}24x4xII6xHHHH"  # e_phoff, e_shoff, ph/sh size and count
    try:
        phoff, shoff, phentsize, phnum, shentsize, shnum = struct.unpack_from(header, data)
        spans = [(phoff, phnum * phentsize), (shoff, shnum * shentsize)]
        for k in range(phnum):  # every segment's bytes in the file: p_offset, p_filesz
            spans.append(struct.unpack_from(f"{end}8xQ16xQ" if wide else f"{end}4xI8xI", data, phoff + k * phentsize))
    except struct.error:
        spans = [(len(data), 1)]
    if any(offset + size > len(data) for offset, size in spans):
        raise BadLibrary(f"{path} is cut short ({len(data):,} bytes, fewer than its ELF headers name)")


def _open(path: Path | str) -> ctypes.CDLL:
    """Load a kernel library, checking its symbols and ABI version (:class:`BadLibrary` if it is not one)."""
    _check_complete(path)
    dl = ctypes.CDLL(None)  # the process's own symbols: the C library's dlopen, dlerror and dlclose
    dl.dlopen.restype, dl.dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    dl.dlerror.restype, dl.dlclose.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    handle = dl.dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL)  # as ctypes.CDLL opens a library
    if not handle:
        raise BadLibrary(f"{path} does not load ({(dl.dlerror() or b'').decode(errors='replace')})")
    lib = ctypes.CDLL(str(path), handle=handle)
    missing = [name for name in SYMBOLS if not hasattr(lib, name)]
    version = None
    if not missing:
        lib.swarm_abi_version.restype, lib.swarm_abi_version.argtypes = ctypes.c_int, []
        version = lib.swarm_abi_version()
    if missing or version != ABI_VERSION:
        # unloaded, else the dynamic loader would hand this process the same library again for the path the
        # rebuilt one is renamed to
        dl.dlclose(handle)
        what = f"lacks {', '.join(missing)}" if missing else f"has ABI version {version}, not {ABI_VERSION}"
        raise BadLibrary(f"{path} {what}: not a library of these kernels")
    return lib


def _compile(cxx: str, flags: list[str], target: Path) -> ctypes.CDLL:
    """Compile into a temporary file beside ``target``, load it, then rename it to ``target``."""
    loaded: list[ctypes.CDLL] = []

    def write(tmp: str) -> None:
        proc = subprocess.run([cxx, *flags, *COMMON_FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
            first = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
            raise BadLibrary(first or f"{cxx} exited with code {proc.returncode}")
        try:
            loaded.append(_open(tmp))
        except BadLibrary as e:
            raise BadLibrary(f"{cxx} exited 0 without a usable library ({str(e).replace(tmp, 'its output')})") from None

    atomic_write_file(target, write)
    return loaded[0]


def _build(cxx: str) -> Kernels:
    """The kernels from the cache, or built into it; RuntimeError (or OSError) when no flag set gives them."""
    src = SOURCE.read_bytes()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(folder)
    except OSError:
        log.info("%s cannot be written: the SWARM kernels are built in a private temporary folder", folder)
        folder = private_temp_folder("ext")
    with contextlib.suppress(OSError):
        remove_orphan_temps(folder, f".{PREFIX}")  # what builds killed while compiling left
    targets = [(flags, folder / library_name(src, version, flags)) for flags in FLAG_SETS]
    for _, path in targets:  # any set already built wins: a set that fails here is not compiled again
        if path.is_file():
            try:
                return Kernels(_open(path), path)
            except BadLibrary as e:
                log.info("cached kernels not used, building them again: %s", e)
                path.unlink()
    errors = []
    for flags, path in targets:
        try:
            return Kernels(_compile(cxx, flags, path), path)
        except BadLibrary as e:
            errors.append(str(e))
    raise RuntimeError("; ".join(dict.fromkeys(errors)))


class Kernels:
    """ctypes bindings of the fused forward and backward (float32 and float64, contiguous CPU tensors).

    Shapes: rows R = sets x rows_per_set, G = 4H gate values per row; see ``_swarm_kernels.cpp``.
    """

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
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
    try:
        cxx = _compiler()
        if cxx is None:
            raise RuntimeError("no C++ compiler found; install g++ or set CXX")
        return _build(cxx)
    except (OSError, RuntimeError, SwarmctlError, subprocess.SubprocessError) as e:
        _state["error"] = str(e)
        log.warning("fused SWARM kernels unavailable (%s): the SWARM layer uses its PyTorch code on the CPU "
                    "(set SWARMCTL_NO_EXT=1 to silence this)", e)
        return None

"""Loader of the fused SWARM kernels (``_swarm_kernels.cpp``): compiled at first use, cached, optional.

The source is a plain C-ABI file without torch headers, so one compiler call of about a second builds
it. The library is cached under ``$SWARMCTL_CACHE/ext`` (default ``~/.cache/swarmctl/ext``) by a hash
of the source, the compiler, its flags and the CPU, and loaded with ctypes. Nothing is compiled at
import time; ``SWARMCTL_NO_EXT=1`` switches the kernels off (GPU jobs set it so that no device time is
spent compiling).

The cache is not trusted:

- a fresh build is load-tested under a temporary name, in a separate Python process (it must load and
  export every kernel at this ABI version), and renamed into place only if it passes, with its SHA-256
  recorded beside it (``NAME.so.sha256``); a compiler that exits 0 and writes nothing, or garbage,
  leaves nothing in the cache;
- a cached library is loaded only if its bytes match that record; anything else under its name (empty,
  truncated, foreign, of another ABI, a link, a FIFO, an empty folder) is removed and built again, once,
  and is never loaded into this process (loading a truncated library can crash it);
- a flag set whose build failed is remembered for :data:`FAILED_TTL_S` in ``NAME.failed`` (delete it
  to retry at once), so later processes go straight to the next set instead of recompiling;
- where the cache folder cannot be written, builds go to a private folder under the system's
  temporary folder (:func:`_fallback_dir`);
- the temporary file of a build whose process was killed is removed by the next process that looks.

Where no compiler is present or every build fails, :func:`kernels` returns None once and for all, the
layer uses its PyTorch code, and one warning goes to the log.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import Tensor

from swarmctl.errors import SwarmctlError
from swarmctl.files import atomic_write_file, atomic_write_text, remove_orphan_temps

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
FAILED_TTL_S = 24 * 3600  # a failed flag set is not tried again for this long (installing OpenMP later helps)
COMPILE_TIMEOUT_S = 300
MAX_LIBRARY_BYTES = 64 << 20  # the library is about 40 kB; a larger file is not read

_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib": Kernels | None once resolved; "error": why None


class BadLibrary(RuntimeError):
    """A file that is not a loadable kernel library of this ABI version."""


class BuildFailed(RuntimeError):
    """The compiler ran to its end and gave no usable library: the same flags will fail again."""


def disabled() -> bool:
    """True when ``SWARMCTL_NO_EXT`` is set to anything but '' or '0'."""
    return os.environ.get("SWARMCTL_NO_EXT", "") not in ("", "0")


def cache_dir() -> Path:
    """The configured cache folder: ``$SWARMCTL_CACHE/ext``, default ``~/.cache/swarmctl/ext``."""
    root = os.environ.get("SWARMCTL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "swarmctl")
    return Path(root) / "ext"


def _fallback_dir() -> Path:
    """Where builds go when :func:`cache_dir` cannot be written: ``$TMPDIR/swarmctl-UID/ext``, kept only if
    it is a real folder of this user that nobody else can write (else a fresh private folder)."""
    base = Path(tempfile.gettempdir()) / f"swarmctl-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(base)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return base / "ext"
    except OSError:
        pass
    private = Path(tempfile.mkdtemp(prefix="swarmctl-ext-"))  # planted or foreign: a folder of our own
    atexit.register(shutil.rmtree, private, True)
    return private


def unavailable_reason() -> str | None:
    """Why :func:`kernels` returned None in this process (None if it did not, or was not called)."""
    return _state.get("error")  # type: ignore[return-value]


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


def library_name(src: bytes, version: str, flags: list[str]) -> str:
    """The cache file name of a build: a hash of everything that changes the library."""
    key = hashlib.sha256(
        b"\0".join([src, version.encode(), " ".join(flags + COMMON_FLAGS).encode(), _cpu_signature().encode(),
                    platform.machine().encode()])
    ).hexdigest()[:16]
    return f"{PREFIX}{key}.so"


def _regular(path: Path | str) -> os.stat_result:
    try:
        st = os.stat(path)
    except OSError as e:
        raise BadLibrary(f"{path} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the reader, a folder cannot be one
        raise BadLibrary(f"{path} is not a regular file")
    if st.st_size == 0:
        raise BadLibrary(f"{path} is empty")
    if st.st_size > MAX_LIBRARY_BYTES:
        raise BadLibrary(f"{path} is {st.st_size:,} bytes, far too large for these kernels")
    return st


def _digest(path: Path | str) -> str:
    _regular(path)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(MAX_LIBRARY_BYTES + 1)).hexdigest()


def _digest_file(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _verify(path: Path) -> None:
    """Raise :class:`BadLibrary` unless ``path`` holds the very bytes that passed the load test when they
    were built (recorded beside it): a damaged, truncated or replaced file is never loaded, since loading a
    truncated library can crash the process."""
    try:
        recorded = _digest_file(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        raise BadLibrary(f"{path} has no recorded digest (not built by this version)") from None
    if _digest(path) != recorded:
        raise BadLibrary(f"{path} is not the library that was built (its SHA-256 differs from the record)")


_PROBE = """import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
missing = [name for name in sys.argv[2:] if not hasattr(lib, name)]
print(json.dumps({"missing": missing, "abi": None if missing else lib.swarm_abi_version()}))
"""


def _probe(path: Path | str) -> None:
    """Load ``path`` in a separate Python and check its symbols and ABI version (:class:`BadLibrary` if not
    a library of these kernels): a file that crashes the loader crashes only that process."""
    _regular(path)
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, str(path), *SYMBOLS],
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise BadLibrary(f"{path} did not load within 120 s") from None
    if proc.returncode != 0:
        why = f"signal {-proc.returncode}" if proc.returncode < 0 else (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise BadLibrary(f"{path} does not load ({why})")
    info = json.loads(proc.stdout)
    if info["missing"]:
        raise BadLibrary(f"{path} lacks {', '.join(info['missing'])}: not a library of these kernels")
    if info["abi"] != ABI_VERSION:
        raise BadLibrary(f"{path} has ABI version {info['abi']}, not {ABI_VERSION}")


def _open(path: Path | str) -> ctypes.CDLL:
    """Load a library that passed :func:`_verify` or :func:`_probe`, checking its symbols and ABI again."""
    _regular(path)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise BadLibrary(f"{path} does not load ({e})") from None
    missing = [name for name in SYMBOLS if not hasattr(lib, name)]
    version = None
    if not missing:
        lib.swarm_abi_version.restype, lib.swarm_abi_version.argtypes = ctypes.c_int, []
        version = lib.swarm_abi_version()
    if missing or version != ABI_VERSION:
        _close(lib)
        what = f"lacks {', '.join(missing)}" if missing else f"has ABI version {version}, not {ABI_VERSION}"
        raise BadLibrary(f"{path} {what}: not a library of these kernels")
    return lib


def _close(lib: ctypes.CDLL) -> None:
    """Unload a library that failed its check, so that a rebuilt one under the same name is really loaded."""
    import _ctypes

    with contextlib.suppress(OSError, AttributeError):
        _ctypes.dlclose(lib._handle)


def _discard(path: Path) -> None:
    """Remove a bad cached library (a file or link, or an empty folder) so that a build can take its name."""
    with contextlib.suppress(OSError):
        _digest_file(path).unlink(missing_ok=True)
    try:
        path.unlink(missing_ok=True)
    except IsADirectoryError:
        try:
            path.rmdir()
        except OSError:
            raise BadLibrary(f"{path} is a folder, not a library; remove it") from None


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _sweep(folder: Path) -> None:
    """Remove the temporary libraries of builds whose process is gone (killed while compiling)."""
    with contextlib.suppress(OSError):
        remove_orphan_temps(folder, f".{PREFIX}")


def _compile(cxx: str, flags: list[str], target: Path) -> ctypes.CDLL:
    """Compile into a temporary file beside ``target``, load-test it, then rename it to ``target``."""
    loaded: list[ctypes.CDLL] = []

    def write(tmp: str) -> None:
        try:
            proc = subprocess.run([cxx, *flags, *COMMON_FLAGS, str(SOURCE), "-o", tmp],
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{cxx} took over {COMPILE_TIMEOUT_S} s") from None
        if proc.returncode < 0:  # killed by a signal: not the flags' fault, try again next time
            raise RuntimeError(f"{cxx} was killed by signal {-proc.returncode}")
        if proc.returncode != 0:
            raise BuildFailed(_first_error(proc.stderr) or f"{cxx} exited with code {proc.returncode}")
        try:
            _probe(tmp)
            loaded.append(_open(tmp))
        except BadLibrary as e:
            why = str(e).replace(tmp, "its output")
            raise BuildFailed(f"{cxx} exited 0 without a usable library ({why})") from None
        atomic_write_text(_digest_file(target), _digest(tmp) + "\n")  # before the library takes its name

    atomic_write_file(target, write)
    return loaded[0]


def _first_error(stderr: str) -> str:
    """The compiler's first line that says "error" (else its last line), without the temporary file names."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")


def _build(cxx: str) -> Kernels:
    """The kernels from the cache, or built into it; RuntimeError (or OSError) when no flag set gives them."""
    src = SOURCE.read_bytes()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    home = cache_dir()
    _sweep(home)
    folders = [home]  # looked in, in order; the last is where builds go once chosen
    writable: Path | None = None
    errors = []
    for flags in FLAG_SETS:
        name = library_name(src, version, flags)
        found = _cached(folders, name)
        if found is None and writable is None:
            writable = _build_folder(home)
            if writable != home:
                folders.append(writable)
                found = _cached([writable], name)
        if found is not None:
            return found
        target = writable / name
        failed = target.with_suffix(".failed")
        remembered = _remembered(failed)
        if remembered is not None:
            errors.append(f"{remembered} (remembered from an earlier build; delete {failed} to retry)")
            continue
        _discard(target)
        try:
            return Kernels(_compile(cxx, flags, target), target)
        except BuildFailed as e:
            errors.append(str(e))
            with contextlib.suppress(OSError, SwarmctlError):
                atomic_write_text(failed, f"{' '.join(flags)}: {e}\n")
    raise RuntimeError("; ".join(dict.fromkeys(errors)))


def _cached(folders: list[Path], name: str) -> Kernels | None:
    """The first valid library called ``name`` in ``folders``; a bad one is removed (where it can be)."""
    for folder in folders:
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            _verify(path)
            return Kernels(_open(path), path)
        except BadLibrary as e:
            log.info("cached kernels not used, building them again: %s", e)
            with contextlib.suppress(OSError, BadLibrary):
                _discard(path)
    return None


def _build_folder(home: Path) -> Path:
    """``home`` if it can be written, else the fallback folder (with its killed builds' files removed)."""
    if _writable(home):
        return home
    folder = _fallback_dir()
    log.info("%s cannot be written: the SWARM kernels are built in %s", home, folder)
    folder.mkdir(parents=True, exist_ok=True)
    _sweep(folder)
    return folder


def _remembered(failed: Path) -> str | None:
    """The recorded error of a flag set that failed less than FAILED_TTL_S ago, else None."""
    try:
        if time.time() - failed.stat().st_mtime > FAILED_TTL_S:
            return None
        return failed.read_text(errors="replace").strip().partition(": ")[2] or "failed"
    except OSError:
        return None


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

    @classmethod
    def load(cls, path: Path) -> Kernels:
        """The kernels of a cached library; :class:`BadLibrary` unless it is the one built and tested there."""
        _verify(Path(path))
        return cls(_open(path), Path(path))

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
        _state["error"] = "no C++ compiler found"
        log.warning("no C++ compiler found: the SWARM layer uses its PyTorch code on the CPU "
                    "(install g++ for the fused kernels, or set SWARMCTL_NO_EXT=1 to silence this)")
        return None
    try:
        return _build(cxx)
    except (OSError, RuntimeError, SwarmctlError, subprocess.SubprocessError) as e:
        _state["error"] = str(e)
        log.warning("fused SWARM kernels unavailable (%s): the SWARM layer uses its PyTorch code on the CPU", e)
        return None

"""Build and load time of the fused CPU kernels, side by side: swarmctl's loader (``layers/_ext.py``: its own
cache, one compiler call, ctypes) and ``torch.utils.cpp_extension.load`` (ninja in a build folder, loaded by
``torch.ops.load_library``) on the same source and flags, each in a fresh process, with a cold cache (an empty
folder: compile, then load) and a warm one (the folder of the cold run: load only).

    python benchmarks/ext_build.py [--repeat 3] [--repo CHECKOUT]

``--repo``: the checkout whose swarmctl is measured (default: this one), to compare two versions of the loader.

Per row, the median over --repeat processes of the loader's wall and CPU seconds (from its first call, with the
import of cpp_extension, to kernels that answer their ABI version; CPU with the compiler's; PyTorch's own import
is not counted), then the same for the whole process. On a shared machine the CPU seconds are the steadier.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_START = ("import ctypes, os, resource, sys, time, torch\n"
          "from swarmctl.layers import _ext\n"
          "def cpu():\n"
          "    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)\n"
          "               for f in ('ru_utime', 'ru_stime'))\n"
          "os.environ['SWARMCTL_CACHE'] = sys.argv[1]\n"
          "start, start_cpu = time.perf_counter(), cpu()\n")
_END = "print(time.perf_counter() - start, cpu() - start_cpu)\n"
PROBES = {
    "swarmctl": _START + "assert _ext.kernels() is not None, _ext.unavailable_reason()\n" + _END,
    "cpp_extension": _START + (
        "from torch.utils import cpp_extension\n"
        "path = cpp_extension.load('swarm_kernels', [str(_ext.SOURCE)], extra_cflags=_ext.FLAG_SETS[0],\n"
        "    extra_ldflags=['-fopenmp'], build_directory=sys.argv[1], is_python_module=False)\n"
        "assert ctypes.CDLL(path).swarm_abi_version() == _ext.ABI_VERSION\n") + _END,
}


def run_once(loader: str, folder: Path, repo: Path) -> tuple[float, ...]:
    """The loader's wall and CPU seconds (with the compiler's), then the whole process's."""
    env = {k: v for k, v in os.environ.items() if k != "SWARMCTL_NO_EXT"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")])
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROBES[loader], str(folder)], capture_output=True, text=True,
                          env=env)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{loader} failed:\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return (*map(float, proc.stdout.split()[-2:]), wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=REPO)
    args = ap.parse_args()
    import torch

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"torch {torch.__version__}, load {os.getloadavg()[0]:.2f} at start\n")
    print("| loader | cache | loader s | loader CPU s | process s | process CPU s |")
    print("|---|---|---|---|---|---|")
    for loader in PROBES:
        rows: dict[str, list[tuple[float, ...]]] = {"cold": [], "warm": []}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="swarmctl-ext-") as folder:
                for cache in rows:
                    rows[cache].append(run_once(loader, Path(folder), args.repo))
        for cache, runs in rows.items():
            print(f"| {loader} | {cache} | " + " | ".join(f"{statistics.median(r[i] for r in runs):.2f}"
                                                         for i in range(4)) + " |")
    print(f"\nload {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()

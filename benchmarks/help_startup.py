"""Wall time and peak memory of `swarmctl --help` and every `swarmctl COMMAND --help` (target: at most 0.5 s
each on an idle machine), each a fresh process; the median of --repeat runs per command.

    python benchmarks/help_startup.py [--repeat 5] [--limit 0.5]

Exits 1 when a median exceeds --limit, or when a help imported PyTorch. Measured with
``/usr/bin/time``-like accounting from ``os.wait4`` (peak resident set size of the child).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

_PROBE = ("import atexit, os, sys\n"
          "atexit.register(lambda: os.write(2, b'\\nTORCH' if 'torch' in sys.modules else b'\\nNO-TORCH'))\n"
          "sys.argv = ['swarmctl', *sys.argv[1:]]\n"
          "from swarmctl.cli import main\n"
          "main()\n")


def commands() -> list[str]:
    out = subprocess.run([sys.executable, "-c", "from typer.main import get_command\nfrom swarmctl.cli import app\n"
                          "print(' '.join(sorted(get_command(app).commands)))"], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def run_once(args: list[str]) -> tuple[float, float, bool]:
    """Seconds, peak RSS in MB, whether torch was imported."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _PROBE, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "100"})
    err = proc.stderr.read() if proc.stderr else b""
    _, _, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    return seconds, usage.ru_maxrss / 1024, err.rstrip().endswith(b"TORCH") and not err.rstrip().endswith(b"NO-TORCH")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--limit", type=float, default=0.5)
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}")
    failed = False
    for argv in [["--help"], *([c, "--help"] for c in commands())]:
        runs = [run_once(argv) for _ in range(args.repeat)]
        seconds = statistics.median(r[0] for r in runs)
        memory = max(r[1] for r in runs)
        torch_imported = any(r[2] for r in runs)
        bad = seconds > args.limit or torch_imported
        failed |= bad
        print(f"swarmctl {' '.join(argv):28} {seconds:6.3f} s  {memory:6.0f} MB"
              f"{'  torch imported' if torch_imported else ''}{'  OVER' if bad else ''}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

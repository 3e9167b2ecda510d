"""`swarmctl cluster` on one large set: wall time and peak memory (RSS) of the whole command, as a user runs it.

    python benchmarks/cluster_large.py [--n 1000000] [--formats csv npy] [--out DIR]

One task of N points is drawn from the paper's generator distribution (benchmarks/mixtures.py), written as
CSV (with a header) and .npy, and clustered by the shipped SWARM (192-10-1) in a fresh process per format
(`python -m swarmctl cluster FILE --out ... --force --device cpu`). Peak RSS is the child's own maximum
(os.wait4). The command's own line gives the forward pass alone. The machine's load is printed before and
after: other processes on the CPU slow the pass down.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mixtures import draw_task


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_cluster(points: Path, out: Path, extra: list[str]) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS in bytes, output, CPU seconds) of one `swarmctl cluster` process."""
    cmd = [sys.executable, "-m", "swarmctl", "cluster", str(points), "--out", str(out), "--force", "--device", "cpu",
           *extra]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        log.seek(0)
        text = log.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"swarmctl cluster failed:\n{text}")
    return wall, usage.ru_maxrss * 1024, text, usage.ru_utime + usage.ru_stime  # ru_maxrss is in KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--formats", nargs="*", default=["npy", "csv"], choices=["npy", "csv"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="folder for the files [default: a temp folder]")
    ap.add_argument("extra", nargs="*", help="more options for swarmctl cluster (after --)")
    args = ap.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="swarmctl-cluster-"))
    folder.mkdir(parents=True, exist_ok=True)
    points, labels, _, _ = draw_task(args.n, np.random.RandomState(args.seed))
    print(f"N = {args.n:,}, K = {labels.max() + 1}; cpu threads {os.cpu_count()}; before: {_uptime()}", flush=True)
    np.save(folder / "tiny.npy", points[:100].astype(np.float64))
    _, base, _, _ = run_cluster(folder / "tiny.npy", folder / "tiny-clusters.csv", args.extra)
    print(f"the command on 100 points (imports, model): peak RSS {base / 1e9:.2f} GB", flush=True)
    for fmt in args.formats:
        path = folder / f"points.{fmt}"
        if fmt == "csv":
            np.savetxt(path, points, delimiter=",", header="x,y", comments="", fmt="%.7g")
        else:
            np.save(path, points.astype(np.float64))
        wall, rss, text, cpu = run_cluster(path, folder / f"clusters-{fmt}.csv", args.extra)
        forward = re.search(r"clustered in ([\d.]+) s", text)
        pred = np.loadtxt(folder / f"clusters-{fmt}.csv", delimiter=",", skiprows=2, usecols=2,  # comment, header
                          dtype=np.int64)
        agree = _matched(pred, labels)
        print(f"{fmt}: wall {wall:.1f} s (forward pass {forward.group(1) if forward else '?'} s; {cpu:.0f} CPU s), "
              f"peak RSS {rss / 1e9:.2f} GB ({rss / 2**30:.2f} GiB), matched accuracy {agree:.1%}; after: {_uptime()}",
              flush=True)


def _matched(pred: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of points whose cluster maps to their true cluster under the best one-to-one matching."""
    from scipy.optimize import linear_sum_assignment

    table = np.zeros((pred.max() + 1, truth.max() + 1))
    np.add.at(table, (pred, truth), 1)
    rows, cols = linear_sum_assignment(-table)
    return table[rows, cols].sum() / len(truth)


if __name__ == "__main__":
    main()

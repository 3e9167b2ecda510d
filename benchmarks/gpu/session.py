"""One prepared GPU call for a session that has a single command's worth of device time.

Prints the card, runs the GPU tests once, times the layer against the naive one
(benchmarks/layer_throughput.py --device cuda), generates the seed-0 clustering data, times real epochs
and steps in each numeric mode (step_timing.py), then runs calls (a) clustering (SWARM and the Set
Transformer), (b) MoG and (c) MNIST side by side on the one card. Packs everything into at most 8
files in OUT:
  gpu-tests.txt bench.txt clustering.tgz mog.tgz image.tgz image-last.pt image-best.pt

    PYTHONPATH=. python3 benchmarks/gpu/session.py OUT [--wall 550] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tarfile
from pathlib import Path

from _common import PY, REPO, Deadline, card, env, finish, gpu_tests, log, start

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=550.0, help="seconds for the whole call")
    ap.add_argument("--data-dir", default="datasets", help="image files in torchvision's layout (for (c))")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work", help="scratch folder (emptied first)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in seconds on a CPU")
    a = ap.parse_args()
    deadline = Deadline(a.wall)
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    work = a.work
    shutil.rmtree(work, ignore_errors=True)
    (work / "parts").mkdir(parents=True)
    card()
    gen_args = ["gen-data", "--seed", "0", "--out", str(work / "clustering-seed0.h5")]
    if a.smoke:
        gen_args += ["--tasks", "60", "--n-min", "20", "--n-max", "60"]
    gen = start(gen_args, work / "gen-data.txt")  # CPU work, beside the tests and the timing
    gpu_tests(out, timeout=120)
    bench = ["benchmarks/layer_throughput.py", "--device", "cuda" if not a.smoke else "cpu"]
    if a.smoke:
        bench += ["--sets", "2", "--entities", "20", "--hidden", "8", "--iters", "2", "--repeats", "1"]
    with open(out / "bench.txt", "w") as fh:
        log("layer_throughput")
        finish(subprocess.Popen([PY, *bench], cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT), 75)
        if finish(gen, deadline.left() - 300) != 0:
            log("gen-data failed: " + (work / "gen-data.txt").read_text()[-500:])
            return 1
        log("step_timing")
        timing = [PY, str(HERE / "step_timing.py"), str(work / "clustering-seed0.h5"), *(["--smoke"] * a.smoke)]
        finish(subprocess.Popen(timing, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT), 110, grace=2)
    log("bench.txt:\n" + (out / "bench.txt").read_text())

    smoke = ["--smoke"] if a.smoke else []
    wall = deadline.left() - 20  # room to pack
    parts = {"clustering": start([str(HERE / "clustering.py"), str(work / "parts" / "clustering"), "--wall",
                                  f"{wall:.0f}", "--skip-tests", "--with-st", "--data",
                                  str(work / "clustering-seed0.h5"), "--work", str(work / "clustering"), *smoke],
                                 work / "clustering.txt")}
    for name, extra in (("mog", []), ("image", ["--data-dir", a.data_dir])):
        parts[name] = start([str(HERE / f"{name}.py"), str(work / "parts" / name), "--wall", f"{wall:.0f}",
                             "--skip-tests", "--work", str(work / name), *extra, *smoke], work / f"{name}.txt")
    codes = {name: finish(proc, deadline.left() - 10, grace=5) for name, proc in parts.items()}
    log(f"exit codes: {codes}")

    for name in parts:
        folder = work / "parts" / name
        shutil.copy2(work / f"{name}.txt", folder / "script.txt") if folder.is_dir() else None
        for pt in ("last.pt", "best.pt") if name == "image" else ():
            if (folder / pt).is_file():  # 13 MB each: beside the archive, each under the 16 MiB a file may hold
                shutil.move(folder / pt, out / f"image-{pt}")
        if folder.is_dir():
            with tarfile.open(out / f"{name}.tgz", "w:gz") as tar:
                tar.add(folder, arcname=name)
    log(f"done, {deadline.left():.0f} s left")
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

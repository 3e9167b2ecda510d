"""The one prepared command for a session with a card: continue every campaign where the repository left it.

In order (README, "A session with a card"):
 1. print the card; start generating the seed-0 clustering data on the host when the clustering
    campaign has runs left;
 2. the GPU tests (pytest -m gpu: CUDA against the CPU, CUDA graphs against eager steps, no host sync)
    -> gpu-tests.txt;
 3. the step timings of every mode (step_timing.py) -> bench.txt, unless campaigns/timing.json holds
    them from an earlier session (--retime measures again); each task then trains in its fastest mode
    (CUDA graphs only when the GPU tests passed);
 4. the campaigns (campaign.py), largest gap to the paper first, each alone on the card for its share;
 5. packs at most 8 files into OUT: gpu-tests.txt bench.txt session.json, NAME.tgz per campaign that
    ran, and the image campaign's NAME-last.pt and NAME-best.pt (under 16 MiB each).

Then, on the session's own machine: `make campaign-commit FROM=<the returned folder>` (commit_session.py)
puts them into campaigns/ and swarmctl/pretrained/ and commits.

    PYTHONPATH=. python3 benchmarks/gpu/session.py OUT [--wall 550] [--smoke] [--retime]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tarfile
import traceback
from pathlib import Path

import campaign
from _common import PY, REPO, Deadline, card, env, finish, gpu_tests, log, start

HERE = Path(__file__).resolve().parent
PACK_RESERVE = 15.0  # seconds kept for packing the returned files


def choose_flags(timing: dict, graphs_ok: bool) -> dict[str, list[str]]:
    """Each task's fastest measured step mode among those `swarmctl train` offers (bf16 stays off: its
    effect on a whole run's bits/dim is not measured yet)."""
    flags: dict[str, list[str]] = {}
    options = {"eager": [], "graphs": ["--cuda-graphs"], "compile": ["--compile"], "tf32": [],
               "tf32+graphs": ["--cuda-graphs"], "tf32+compile": ["--compile"]}
    for task, key in (("clustering", "clustering_s_per_epoch"), ("mog", "mog_ms_per_step"),
                      ("image", "image_s_per_epoch")):
        measured = {m: t for m, t in timing.get(key, {}).items() if m in options and (graphs_ok or "graphs" not in m)}
        if measured:
            flags[task] = options[min(measured, key=measured.get)]
    return flags


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=550.0, help="seconds for the whole call")
    ap.add_argument("--campaigns", type=Path, default=campaign.CAMPAIGNS, help="the campaigns folder to continue")
    ap.add_argument("--data-dir", default="datasets", help="image files in torchvision's layout")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work", help="scratch folder (emptied first)")
    ap.add_argument("--retime", action="store_true", help="measure the step modes again")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in minutes on a CPU")
    a = ap.parse_args()
    deadline = Deadline(a.wall)
    out, work, root = a.out, a.work, a.campaigns
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    facts: dict = {"card": card(), "wall": a.wall}
    order = campaign.plan(root)
    facts["plan"] = [{"campaign": n, "gap": round(g, 4)} for n, g in order]
    log("plan (largest gap to the paper first): " + ", ".join(f"{n} {g:.3f}" for n, g in order))

    data = work / "clustering-seed0.h5"
    timing_file = root / "timing.json"
    measure = a.retime or not timing_file.is_file()
    gen = None
    if measure or any(n == "clustering" for n, _ in order):  # the clustering runs and timing read it
        size = ["--tasks", "60", "--n-min", "20", "--n-max", "60"] if a.smoke else []
        gen = start(["gen-data", "--seed", "0", "--out", str(data), *size], work / "gen-data.txt")  # host work
    gen_rc: list[int] = []

    def wait_for_data() -> bool:
        if gen is None:
            return False
        if not gen_rc:
            gen_rc.append(finish(gen, max(deadline.left() - 60, 1)))
        return gen_rc[0] == 0

    facts["gpu_tests_exit"] = gpu_tests(out, timeout=150)
    graphs_ok = facts["gpu_tests_exit"] in (0, 5)  # 5: nothing collected (no CUDA: every test skipped)
    with open(out / "bench.txt", "w") as fh:
        if measure:
            log("step_timing")  # MoG and images first: the clustering part reads the data generated meanwhile
            cmd = [PY, str(HERE / "step_timing.py"), str(data), "--json", str(work / "timing.json"),
                   *(["--smoke"] * a.smoke)]
            finish(subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT), 200, grace=2)
            timing = json.loads((work / "timing.json").read_text()) if (work / "timing.json").is_file() else {}
        else:
            timing = json.loads(timing_file.read_text())
            fh.write(f"step timings from {timing_file}, measured by an earlier session (--retime measures "
                     f"again):\n{json.dumps(timing, indent=2)}\n")
    facts["timing_measured"] = measure
    facts["timing"] = timing
    flags = choose_flags(timing, graphs_ok)
    facts["flags"] = flags
    log(f"step modes: {flags}")

    ctx = campaign.Context(root, work, out, a.smoke, flags, a.data_dir, data, wait_for_data, facts["card"])
    facts["seconds"] = {}
    save(out, facts)
    for i, (name, _) in enumerate(order):
        left = deadline.left() - PACK_RESERVE
        budget = campaign.share(order, i, left)
        log(f"{name}: share {budget:.0f} s of {left:.0f} s")
        try:
            if name == "clustering":
                used = campaign.run_clustering(ctx, budget, left)
            elif name == "mog":
                mode = {"--cuda-graphs": "graphs", "--compile": "compile"}.get((flags.get("mog") or [""])[0], "eager")
                used = campaign.run_mog(ctx, budget, left, timing.get("mog_ms_per_step", {}).get(mode))
            else:
                used = campaign.run_image(ctx, name, budget, left)
        except Exception:  # one campaign's failure must not cost the others (or what this one wrote)
            log(f"{name} failed:\n{traceback.format_exc()}")
            used = -1.0
        facts["seconds"][name] = round(used, 1)
        pack(work / "parts" / name, out / f"{name}.tgz")  # at once: a command cut short keeps it
        save(out, facts)

    if gen is not None and gen.poll() is None:
        gen.kill()
    log(f"done, {deadline.left():.0f} s left; returned: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def pack(folder: Path, archive: Path) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(folder, arcname=folder.name)


def save(out: Path, facts: dict) -> None:
    (out / "session.json").write_text(json.dumps(facts, indent=2) + "\n")

if __name__ == "__main__":
    raise SystemExit(main())

"""The one prepared command for a GPU job with a wall-time limit: continue every campaign where the
repository left it, and return everything learned by any moment the job may be stopped.

Phases (each writes its result into OUT the moment it ends; session.json is rewritten atomically after
every phase and every campaign, so a kill at any point leaves a readable record of what was done):
 0. seconds: the card, driver, CUDA, torch and Triton versions; every dependency imported; every input
    the campaigns need checked (the image files, the campaigns' own files), what is missing named.
    The seed-0 clustering data starts generating on the host when something will read it.
 1. ``pytest -m gpu`` under a hard cap -> gpu-tests.txt (written before phase 2 starts). CUDA graphs are
    used only when these tests pass.
 2. step timings (step_timing.py, no whole-model compiles; its JSON rewritten after every mode) -> bench.txt
    and session.json's ``timing``, and one cold-compile probe under its own timeout (compile seconds and
    steady step time). Skipped when campaigns/timing.json holds an earlier job's numbers (--retime measures
    again). Each task then trains in the mode that does the most steps in the share it will get, its
    compile or capture time counted against that share.
 3. the campaigns on what is left: MoG first while it is furthest from the paper, then MNIST with at
    least 2 minutes of training (Fashion-MNIST once MNIST reaches the paper), then the clustering table;
    each packs its files as soon as it ends: NAME.tgz, and the image campaign's NAME-last.pt and
    NAME-best.pt. A campaign that did not run packs nothing.

At most 8 files come back: session.json gpu-tests.txt bench.txt, and up to five campaign files.
Then, on a machine with the repository: ``make campaign-commit FROM=<the returned folder>``.

    PYTHONPATH=. python3 benchmarks/gpu/session.py OUT [--wall 540] [--smoke] [--retime]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

import campaign
from _common import PY, REPO, STOPPING, Deadline, env, finish, gpu_tests, log, start, stop_on_signals

HERE = Path(__file__).resolve().parent
PACK_RESERVE = 15.0  # seconds kept at the end for packing the returned files
TESTS_CAP = 100.0  # phase 1
TIMING_CAP = 100.0  # phase 2, the step timings
PROBE_CAP = 60.0  # phase 2, the cold-compile probe
DEPENDENCIES = ("torch", "torchvision", "numpy", "scipy", "h5py", "matplotlib", "typer", "rich", "swarmctl")
IMAGE_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
IMAGE_FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}  # torchvision's layout


# ---- writing into OUT --------------------------------------------------------------------------------------

def atomic_write(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file and a rename: a reader sees the old file or the new."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save(out: Path, facts: dict) -> None:
    atomic_write(out / "session.json", json.dumps(facts, indent=2) + "\n")


def pack(folder: Path, archive: Path) -> bool:
    """``folder`` as ``archive`` (tar.gz, one top folder), through a temporary name; nothing when empty."""
    if not (folder.is_dir() and any(folder.iterdir())):
        return False
    tmp = archive.with_name(archive.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    os.replace(tmp, archive)
    return True


# ---- phase 0 -----------------------------------------------------------------------------------------------

def versions() -> dict:
    """The card and the software under it; every dependency imported (an import error is recorded)."""
    facts: dict = {"python": sys.version.split()[0], "imports": {}}
    for name in DEPENDENCIES:
        try:
            mod = importlib.import_module(name)
            facts["imports"][name] = getattr(mod, "__version__", "ok")
        except Exception as exc:  # a missing package is a fact of this machine, not a crash
            facts["imports"][name] = f"FAILED: {type(exc).__name__}: {exc}"
    if str(facts["imports"]["torch"]).startswith("FAILED"):
        facts.update(torch=None, cuda=None, triton=None, card="no torch", driver=None)
        log(f"torch cannot be imported here ({facts['imports']['torch']}); use the Python that has swarmctl's "
            "dependencies")
        return facts
    import torch

    facts["torch"], facts["cuda"] = torch.__version__, torch.version.cuda
    try:
        import triton

        facts["triton"] = triton.__version__
    except Exception:
        facts["triton"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        facts["card"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            facts["driver"] = smi.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            facts["driver"] = None
    else:
        facts["card"], facts["driver"] = "cpu (no CUDA)", None
    log(f"device: {facts['card']}; driver {facts['driver']}; torch {facts['torch']} (CUDA {facts['cuda']}); "
        f"triton {facts['triton']}; python {facts['python']}")
    bad = {k: v for k, v in facts["imports"].items() if str(v).startswith("FAILED")}
    if bad:
        log(f"imports that failed: {bad}")
    return facts


def missing_inputs(order: list[tuple[str, float]], root: Path, data_dir: Path) -> dict[str, list[str]]:
    """For each planned campaign, the inputs it needs that are not there (an empty list: all present)."""
    missing: dict[str, list[str]] = {}
    for name, _ in order:
        need = []
        if name in IMAGE_FOLDERS:
            raw = data_dir / IMAGE_FOLDERS[name] / "raw"
            need += [str(raw / f) + "(.gz)" for f in IMAGE_FILES
                     if not (raw / f).is_file() and not (raw / f"{f}.gz").is_file()]
        progress = root / name / "progress.json"
        try:
            json.loads(progress.read_text())
        except (OSError, ValueError):
            need.append(f"{progress} (readable JSON)")
        missing[name] = need
        if need:
            log(f"{name}: missing {', '.join(need)}; this campaign is skipped")
    return missing


# ---- phase 2: which step mode each task trains in ----------------------------------------------------------

OPTIONS = {"eager": [], "tf32": [], "graphs": ["--cuda-graphs"], "tf32+graphs": ["--cuda-graphs"],
           "compile": ["--compile"], "tf32+compile": ["--compile"]}
KEYS = {"clustering": "clustering_s_per_epoch", "mog": "mog_ms_per_step", "image": "image_s_per_epoch"}
STEPS = {"clustering": 90, "mog": 1, "image": 1200}  # steps per unit the timing key is measured in
SCALE = {"clustering": 1.0, "mog": 1e-3, "image": 1.0}  # the unit in seconds


def step_seconds(timing: dict, task: str) -> dict[str, float]:
    """Seconds per step of each measured mode of ``task`` (the modes `swarmctl train` offers; bf16 stays
    off, its effect on a whole run is not measured), the compile probe's steady step included."""
    key = KEYS[task]
    out = {m: t * SCALE[task] / STEPS[task] for m, t in (timing.get(key) or {}).items()
           if m in OPTIONS and isinstance(t, (int, float)) and t > 0}
    probe = compile_probe(timing, task)
    steady = probe.get("steady_ms_per_step", probe.get("steady_s_per_epoch"))
    if probe.get("finished") and isinstance(steady, (int, float)) and steady > 0:
        unit = 1e-3 if "steady_ms_per_step" in probe else 1.0 / STEPS[task]
        out["compile"] = steady * unit
    return out


def compile_probe(timing: dict, task: str) -> dict:
    """The cold-compile probe of ``task``: this job's (``compile_probe``) or an earlier job's, kept per task
    in ``compile_probes``; empty when none was measured."""
    probe = timing.get("compile_probe")
    if isinstance(probe, dict) and probe.get("task") == task:
        return probe
    probe = (timing.get("compile_probes") or {}).get(task)
    return probe if isinstance(probe, dict) else {}


def start_cost(timing: dict, task: str, mode: str) -> float:
    """Seconds a fresh job spends before ``mode`` reaches its steady step: the compile probe's compile time,
    or the warm-up and capture time the step timing measured; 0 when not measured (eager)."""
    if "compile" in mode:
        seconds = compile_probe(timing, task).get("compile_s")
        return float(seconds) if isinstance(seconds, (int, float)) else float("inf")
    warm = timing.get("warmup_s") or {}
    value = warm.get(f"{task}/{mode}")
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def choose_flags(timing: dict, graphs_ok: bool, shares: dict[str, float]) -> dict[str, list[str]]:
    """Each task's mode that does the most steps in the seconds it will train (``shares``): the share less
    the mode's start cost, divided by its step time. CUDA graphs only when the GPU tests passed."""
    flags: dict[str, list[str]] = {}
    for task in KEYS:
        share = shares.get(task, 0.0)
        best, most = None, -1.0
        for mode, per_step in step_seconds(timing, task).items():
            if "graphs" in mode and not graphs_ok:
                continue
            steps = (share - start_cost(timing, task, mode)) / per_step
            if steps > most:
                best, most = mode, steps
        if best is not None and most > 0:
            flags[task] = OPTIONS[best]
    return flags


# ---- the phases ---------------------------------------------------------------------------------------------

def timings(data: Path, work: Path, out: Path, deadline: Deadline, smoke: bool, probe_task: str | None) -> dict:
    """Phase 2: the step timings under their cap, then the compile probe under its own; whatever each wrote
    before its end or its kill is kept."""
    path = work / "timing.json"
    with open(out / "bench.txt", "a") as fh:
        cap = min(TIMING_CAP, max(deadline.left() * 0.3, 5))
        log(f"phase 2: step timings (cap {cap:.0f} s)")
        cmd = [PY, str(HERE / "step_timing.py"), str(data), "--json", str(path), "--budget", f"{cap - 10:.0f}",
               *(["--smoke"] * smoke)]
        finish(subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT), cap, grace=3)
        timing = read_json(path)
        if probe_task and deadline.left() > PROBE_CAP * 3:
            probe = work / "probe.json"
            log(f"phase 2: cold-compile probe of {probe_task} (cap {PROBE_CAP:.0f} s)")
            cmd = [PY, str(HERE / "step_timing.py"), str(data), "--json", str(probe), "--compile-probe", probe_task,
                   *(["--smoke"] * smoke)]
            penv = {**env(), "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache")}  # cold: a fresh folder
            rc = finish(subprocess.Popen(cmd, cwd=REPO, env=penv, stdout=fh, stderr=subprocess.STDOUT), PROBE_CAP,
                        grace=3)
            found = read_json(probe).get("compile_probe") or {"task": probe_task}
            found.setdefault("compile_s", None)
            found["exit"] = rc
            if rc != 0 and found.get("compile_s") is None:  # killed before its first compiled step
                found["compile_s"] = f">{PROBE_CAP:.0f}"
            timing["compile_probe"] = found
    return timing


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=540.0, help="seconds for the whole job")
    ap.add_argument("--campaigns", type=Path, default=campaign.CAMPAIGNS, help="the campaigns folder to continue")
    ap.add_argument("--data-dir", type=Path, default=REPO / "datasets", help="image files in torchvision's layout")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work", help="scratch folder (emptied first)")
    ap.add_argument("--retime", action="store_true", help="measure the step modes again")
    ap.add_argument("--probe", default="mog", choices=["mog", "image", "clustering", "none"],
                    help="the task whose cold compile is probed in phase 2")
    ap.add_argument("--only", action="append", choices=campaign.NAMES, help="run only this campaign (repeatable)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in minutes on a CPU")
    a = ap.parse_args()
    stop_on_signals()
    deadline = Deadline(a.wall)
    out, work, root = a.out, a.work, a.campaigns
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    facts: dict = {"wall": a.wall, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   "phases": {}, "seconds": {}}

    def phase_done(name: str, t0: float) -> None:
        facts["phases"][name] = round(time.monotonic() - t0, 1)
        if STOPPING:
            facts["stopped"] = f"{STOPPING[0]} during phase {name}"
        save(out, facts)

    # phase 0
    t0 = time.monotonic()
    facts.update(versions())
    if facts["card"] == "no torch":
        phase_done("0-inputs", t0)
        return 1
    order = [(n, g) for n, g in campaign.plan(root) if not a.only or n in a.only]
    facts["plan"] = [{"campaign": n, "gap": round(g, 4)} for n, g in order]
    log("plan: " + ", ".join(f"{n} {g:.3f}" for n, g in order))
    facts["missing"] = missing_inputs(order, root, a.data_dir)
    timing_file = root / "timing.json"
    committed = read_json(timing_file)
    measure = a.retime or not committed
    data = work / "clustering-seed0.h5"
    gen = None
    if measure or any(n == "clustering" for n, _ in order):
        size = ["--tasks", "60", "--n-min", "20", "--n-max", "60"] if a.smoke else []
        gen = start(["gen-data", "--seed", "0", "--out", str(data), *size], work / "gen-data.txt")  # host work
    cuda = facts["card"] != "cpu (no CUDA)"
    phase_done("0-inputs", t0)
    if not cuda and not a.smoke:
        log("no CUDA on this machine: nothing to measure or train (use --smoke to try the script on a CPU)")
        if gen is not None:
            gen.kill()
        return 1

    # phase 1
    t0 = time.monotonic()
    facts["gpu_tests_exit"] = None if STOPPING else gpu_tests(out, min(TESTS_CAP, max(deadline.left() * 0.25, 5)))
    graphs_ok = facts["gpu_tests_exit"] in (0, 5)  # 5: nothing collected (no CUDA: every test skipped)
    phase_done("1-gpu-tests", t0)

    # phase 2
    t0 = time.monotonic()
    if measure and STOPPING:
        timing = {}
    elif measure:
        if gen is not None and deadline.left() > 60:  # the clustering part reads the data: wait for it here
            finish(gen, min(deadline.left() * 0.2, 120))
        timing = timings(data, work, out, deadline, a.smoke, None if a.probe == "none" else a.probe)
    else:
        timing = committed
        with open(out / "bench.txt", "w") as fh:
            fh.write(f"step timings from {timing_file}, measured by an earlier job (--retime measures again):\n"
                     f"{json.dumps(timing, indent=2)}\n")
    facts["timing_measured"], facts["timing"] = measure, timing
    left = deadline.left() - PACK_RESERVE
    shares = {("image" if n in IMAGE_FOLDERS else n): campaign.share(order, i, left, a.smoke)
              for i, (n, _) in enumerate(order)}
    facts["flags"] = flags = choose_flags(timing, graphs_ok, shares)
    log(f"step modes: {flags}")
    phase_done("2-timings", t0)

    # phase 3
    t0 = time.monotonic()
    gen_rc: list[int] = []

    def wait_for_data() -> bool:
        if gen is None:
            return False
        if not gen_rc:
            gen_rc.append(finish(gen, max(deadline.left() - 60, 1)))
        return gen_rc[0] == 0

    ctx = campaign.Context(root, work, out, a.smoke, flags, str(a.data_dir), data, wait_for_data, facts["card"])
    for i, (name, _) in enumerate(order):
        if facts["missing"].get(name) or STOPPING:
            continue
        left = deadline.left() - PACK_RESERVE
        budget = campaign.share(order, i, left, a.smoke)
        log(f"phase 3: {name}: share {budget:.0f} s of {left:.0f} s")
        try:
            if name == "clustering":
                used = campaign.run_clustering(ctx, budget, left)
            elif name == "mog":
                mode = {"--cuda-graphs": "graphs", "--compile": "compile"}.get((flags.get("mog") or [""])[0], "eager")
                used = campaign.run_mog(ctx, budget, left, step_seconds(timing, "mog").get(mode))
            else:
                used = campaign.run_image(ctx, name, budget, left)
        except Exception:  # one campaign's failure must not cost the others (or what this one wrote)
            log(f"{name} failed:\n{traceback.format_exc()}")
            used = -1.0
        facts["seconds"][name] = round(used, 1)
        if used != 0 and pack(work / "parts" / name, out / f"{name}.tgz"):  # at once: a job cut short keeps it
            facts.setdefault("packed", []).append(name)
        save(out, facts)
    phase_done("3-campaigns", t0)

    if gen is not None and gen.poll() is None:
        gen.kill()
    if STOPPING:
        log(f"stopped by {STOPPING[0]}; returned: {', '.join(sorted(p.name for p in out.iterdir()))}")
        return 1
    log(f"done, {deadline.left():.0f} s left; returned: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

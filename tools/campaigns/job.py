"""The campaign job for a GPU with a wall-time limit (`python -m tools.campaigns run`): continue every campaign where
the campaigns folder left it, and return everything learned by any moment the job may be stopped.

Phases (each writes its result into OUT the moment it ends; session.json is rewritten atomically after
every phase and every campaign, so a kill at any point leaves a readable record of what was done):
 0. seconds: the card, driver, CUDA, torch and Triton versions; every dependency imported; every input
    the campaigns need checked (the image files, the campaigns' own files), what is missing named; the
    campaigns whose returned files do not fit beside the others' wait for a later job (plan.within_files).
    The seed-0 clustering data starts generating on the host when something will read it.
 1. ``pytest -m gpu`` under a hard cap -> gpu-tests.txt in logs.tgz (written before phase 2 starts; run
    where the job runs in the repository's checkout). CUDA graphs are used only when these tests pass.
 2. step timings (the repository's benchmarks/gpu/step_timing.py, no whole-model compiles; its JSON
    rewritten after every mode) -> bench.txt in logs.tgz and session.json's ``timing``, and one cold-compile
    probe under its own timeout (compile seconds and steady step time; ``TASK+amp`` probes the bf16 step;
    earlier jobs' probes are kept beside it in ``compile_probes``). Skipped when campaigns/timing.json
    holds an earlier job's numbers (``retime`` measures again), or where the benchmark is not there (not the
    repository's checkout: the committed timings are used). Each task then trains in the mode the trainer's
    own rule picks (training/modes.choose_step_mode: the most steps in the share it will get, start-up
    counted) among the measured modes its task lists as proven, passed as ``train --step MODE``.
    session.json's ``paper_rows`` and ``table``: every row of the paper's tables with its step and GPU
    minutes left, and the clustering table's runs side by side on this card (again after phase 3).
 3. the campaigns on what is left: MoG first while it is furthest from the paper, then MNIST with at
    least 2 minutes of training (Fashion-MNIST once MNIST reaches the paper), then the clustering table;
    each packs its files as soon as it ends: NAME.tgz, MoG's last.pt in parts (mog-last.pt.partK, their
    manifest inside mog.tgz), the image campaign's NAME-last.pt and NAME-best.pt. A campaign that did not
    run packs nothing.

At most ``files`` files come back, each of at most ``file_mib`` MiB (the job's arguments): session.json,
logs.tgz, and the campaigns' files (MoG 5, an image campaign 3, the clustering table 1; plan.returned_files).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from swarmctl.config import DATA_DIR
from swarmctl.errors import SIGNAL as SIGNAL_EXIT
from swarmctl.errors import ConfigError, ResourceError
from swarmctl.files import atomic_write_text
from tools.campaigns import NO_CUDA, PROBES, runners
from tools.campaigns import plan as campaign
from tools.campaigns.plan import LOGS, PACK_RESERVE, TIMING
from tools.campaigns.processes import (
    PY,
    STOPPING,
    Deadline,
    finish,
    gpu_tests,
    launch,
    log,
    start,
    stop_on_signals,
    warn,
)
from tools.campaigns.status import paper_rows

TESTS_CAP = 100.0  # phase 1
TIMING_CAP = 150.0  # phase 2, the step timings (47 s on an H200 before the Triton and MoG bf16 modes)
PROBE_CAP = 60.0  # phase 2, the cold-compile probe
STEP_TIMING = Path("benchmarks") / "gpu" / "step_timing.py"  # the repository's benchmark, from its root
DEPENDENCIES = ("torch", "torchvision", "numpy", "scipy", "h5py", "matplotlib", "typer", "rich", "swarmctl")
IMAGE_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
IMAGE_FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}  # torchvision's layout


@dataclass(frozen=True)
class JobOptions:
    """What `python -m tools.campaigns run` was given: OUT, the job's limits (its wall seconds, the files it
    may return and the MiB each may hold) and the rest."""

    out: Path
    wall: float
    files: int
    file_mib: int
    campaigns: Path = campaign.CAMPAIGNS
    data_dir: Path = Path(DATA_DIR)
    work: Path = Path(".gpu-work")
    retime: bool = False
    probe: str = PROBES[0]
    only: tuple[str, ...] = ()
    smoke: bool = False

    def __post_init__(self) -> None:
        if self.probe not in PROBES:
            raise ConfigError(f"`probe` is {self.probe!r}; choose one of {', '.join(PROBES)}")
        unknown = [n for n in self.only if n not in campaign.NAMES]
        if unknown:
            raise ConfigError(f"`only` names {unknown[0]!r}; the campaigns are {', '.join(campaign.NAMES)}")
        if self.wall <= 0:
            raise ConfigError(f"`wall` is {self.wall:g}; give the job's seconds, > 0")
        if self.files < len(campaign.FIXED_FILES) + 1:
            raise ConfigError(f"`files` is {self.files}; a job returns its record, its logs and at least one "
                              f"campaign's archive: give {len(campaign.FIXED_FILES) + 1} or more")
        if self.file_mib < 1:
            raise ConfigError(f"`file_mib` is {self.file_mib}; give the MiB a returned file may hold, >= 1")

    @property
    def part_limit(self) -> int:
        """Bytes a returned part may hold (the MoG checkpoint's, MOG_PARTS of them): a returned file's limit."""
        return self.file_mib << 20


@dataclass
class Job:
    """One job's state: its options, deadline and the facts session.json records."""

    opts: JobOptions
    deadline: Deadline
    facts: dict = field(default_factory=dict)

    def save(self) -> None:
        atomic_write_text(self.opts.out / "session.json", json.dumps(self.facts, indent=2) + "\n")

    def phase_done(self, name: str, t0: float) -> None:
        self.facts["phases"][name] = round(time.monotonic() - t0, 1)
        if STOPPING:
            self.facts["stopped"] = f"{STOPPING[0]} during phase {name}"
        self.save()


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
        warn(f"torch cannot be imported here ({facts['imports']['torch']}); use the Python that has swarmctl's "
             "dependencies")
        return facts
    import torch

    facts["torch"], facts["cuda"] = torch.__version__, torch.version.cuda
    try:
        import triton

        facts["triton"] = triton.__version__
    except Exception:
        facts["triton"] = None
    facts["card"], facts["driver"] = _card(torch)
    log(f"device: {facts['card']}; driver {facts['driver']}; torch {facts['torch']} (CUDA {facts['cuda']}); "
        f"triton {facts['triton']}; python {facts['python']}")
    bad = {k: v for k, v in facts["imports"].items() if str(v).startswith("FAILED")}
    if bad:
        warn(f"imports that failed: {bad}")
    return facts


def _card(torch) -> tuple[str, str | None]:
    """The accelerator and its driver (``NO_CUDA`` and None without one)."""
    if not torch.cuda.is_available():
        return NO_CUDA, None
    p = torch.cuda.get_device_properties(0)
    card = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return card, smi.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return card, None


def missing_inputs(order: list[tuple[str, float]], root: Path, data_dir: Path) -> dict[str, list[str]]:
    """For each planned campaign, the inputs it needs that are not there (an empty list: all present)."""
    missing: dict[str, list[str]] = {}
    for name, _ in order:
        need = []
        if name in IMAGE_FOLDERS:
            raw = data_dir / IMAGE_FOLDERS[name] / "raw"
            need += [str(raw / f) + "(.gz)" for f in IMAGE_FILES
                     if not (raw / f).is_file() and not (raw / f"{f}.gz").is_file()]
        progress = root / name / campaign.PROGRESS
        if not runners.read_json(progress):
            need.append(f"{progress} (readable JSON)")
        missing[name] = need
        if need:
            log(f"{name}: missing {', '.join(need)}; this campaign is skipped")
    return missing


def inputs_phase(job: Job) -> tuple[list[tuple[str, float]], subprocess.Popen | None, bool] | None:
    """Phase 0: the machine, the plan, the inputs; starts generating the clustering data when it will be read.
    Returns the plan, the generating process and whether to measure the step timings; None to stop (no torch,
    or no CUDA outside a smoke job)."""
    opts, facts, t0 = job.opts, job.facts, time.monotonic()
    facts.update(versions())
    if facts["card"] == "no torch":
        job.phase_done("0-inputs", t0)
        return None
    order = [(n, g) for n, g in campaign.plan(opts.campaigns) if not opts.only or n in opts.only]
    facts["missing"] = missing_inputs(order, opts.campaigns, opts.data_dir)
    order, waiting = campaign.within_files([(n, g) for n, g in order if not facts["missing"][n]], opts.campaigns,
                                           opts.files)
    facts["plan"] = [{"campaign": n, "gap": round(g, 4)} for n, g in order]
    log("plan: " + ", ".join(f"{n} {g:.3f}" for n, g in order))
    if waiting:
        facts["waiting"] = waiting
        log(f"{', '.join(waiting)}: waits for a later job (this one returns at most {opts.files} files, too few "
            "for every campaign's)")
    measure = opts.retime or not runners.read_json(opts.campaigns / TIMING)
    gen = None
    if measure or any(n == "clustering" for n, _ in order):
        size = ["--tasks", "60", "--n-min", "20", "--n-max", "60"] if opts.smoke else []
        gen = start(["gen-data", "--seed", "0", "--out", str(clustering_data(opts)), *size],
                    opts.work / "gen-data.txt")  # host work
    job.phase_done("0-inputs", t0)
    if facts["card"] == NO_CUDA and not opts.smoke:
        warn("no CUDA on this machine: nothing to measure or train (use --smoke to try the job on a CPU)")
        if gen is not None:
            gen.kill()
        return None
    return order, gen, measure


def clustering_data(opts: JobOptions) -> Path:
    return opts.work / "clustering-seed0.h5"


def logs_folder(work: Path) -> Path:
    """Where the GPU tests' and the step timings' output is written (gpu-tests.txt, bench.txt), returned as
    OUT/logs.tgz: one returned file for both."""
    folder = work / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def pack_logs(opts: JobOptions) -> None:
    runners.pack(logs_folder(opts.work), opts.out / LOGS)


# ---- phase 2: the step timings ----------------------------------------------------------------------------

def timings(data: Path, work: Path, deadline: Deadline, smoke: bool, probe_task: str | None, earlier: dict) -> dict:
    """The step timings under their cap, then the compile probe (``TASK`` or ``TASK+amp``) under its own;
    whatever each wrote before its end or its kill is kept (their output in the logs folder's bench.txt).
    The ``earlier`` timings' finished compile probes are kept beside this job's (``compile_probes``)."""
    path = work / "timing.json"
    bench = logs_folder(work) / "bench.txt"
    cap = min(TIMING_CAP, max(deadline.left() * 0.3, 5))
    log(f"phase 2: step timings (cap {cap:.0f} s)")
    cmd = [PY, str(STEP_TIMING), str(data), "--json", str(path), "--budget", f"{cap - 10:.0f}", *(["--smoke"] * smoke)]
    finish(launch(cmd, bench), cap, grace=3)
    timing = runners.read_json(path)
    if probe_task and deadline.left() > PROBE_CAP * 3:
        probe = work / "probe.json"
        log(f"phase 2: cold-compile probe of {probe_task} (cap {PROBE_CAP:.0f} s)")
        task, _, amp = probe_task.partition("+")
        cmd = [PY, str(STEP_TIMING), str(data), "--json", str(probe), "--compile-probe", task,
               *(["--amp"] * bool(amp)), *(["--smoke"] * smoke)]
        cold = {"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache")}  # cold: a fresh folder
        rc = finish(launch(cmd, bench, cold), PROBE_CAP, grace=3)
        found = runners.read_json(probe).get("compile_probe") or {"task": task, "amp": bool(amp)}
        found.setdefault("compile_s", None)
        found["exit"] = rc
        if rc != 0 and found.get("compile_s") is None:  # killed before its first compiled step
            found["compile_s"] = f">{PROBE_CAP:.0f}"
        timing["compile_probe"] = found
    return campaign.keep_probes(timing, earlier)


def timing_phase(job: Job, gen: subprocess.Popen | None, measure: bool) -> dict:
    """Phase 2: measure the step modes (or take the committed timings); returns the timings."""
    opts, deadline = job.opts, job.deadline
    committed = opts.campaigns / TIMING
    if measure and not STEP_TIMING.is_file():
        log(f"no {STEP_TIMING} here (not the repository's checkout): the committed step timings are used")
        measure = False
    if measure and STOPPING:
        return {}
    if measure:
        if gen is not None and deadline.left() > 60:  # the clustering part reads the data: wait for it here
            finish(gen, min(deadline.left() * 0.2, 120))
        return timings(clustering_data(opts), opts.work, deadline, opts.smoke,
                       None if opts.probe == "none" else opts.probe, runners.read_json(committed))
    timing = runners.read_json(committed)
    if opts.probe != "none":
        log(f"no cold-compile probe ({opts.probe}): this job uses the committed step timings; --retime measures "
            "them again and runs the probe")
    atomic_write_text(logs_folder(opts.work) / "bench.txt", f"step timings from {committed}, measured by an "
                      f"earlier job (--retime measures again):\n{json.dumps(timing, indent=2)}\n")
    job.facts["timing_measured"] = False
    return timing


# ---- phase 3: the campaigns -------------------------------------------------------------------------------

def campaigns_phase(job: Job, order: list[tuple[str, float]], gen: subprocess.Popen | None, timing: dict) -> None:
    """Phase 3: each campaign of the plan in turn, on its share of what is left; each packed when it ends."""
    opts, deadline, facts = job.opts, job.deadline, job.facts
    gen_rc: list[int] = []

    def wait_for_data() -> bool:
        if gen is None:
            return False
        if not gen_rc:
            gen_rc.append(finish(gen, max(deadline.left() - 60, 1)))
        return gen_rc[0] == 0

    ctx = runners.Context(opts.campaigns, opts.work, opts.out, opts.smoke, facts["flags"], str(opts.data_dir),
                          clustering_data(opts), wait_for_data, facts["card"], opts.part_limit)
    for i, (name, _) in enumerate(order):
        if facts["missing"].get(name) or STOPPING:
            continue
        left = deadline.left() - PACK_RESERVE
        budget = campaign.share(order, i, left, opts.smoke)
        log(f"phase 3: {name}: share {budget:.0f} s of {left:.0f} s")
        used = _run_campaign(ctx, name, budget, left, timing)
        facts["seconds"][name] = round(used, 1)
        if used != 0 and runners.pack(opts.work / "parts" / name, opts.out / f"{name}.tgz"):  # at once
            facts.setdefault("packed", []).append(name)
        job.save()


def _run_campaign(ctx: runners.Context, name: str, budget: float, left: float, timing: dict) -> float:
    """Seconds campaign ``name`` used (-1: it failed; 0: it did not run)."""
    try:
        if name == "clustering":
            return runners.run_clustering(ctx, budget, left)
        if name == "mog":
            return runners.run_mog(ctx, budget, left, timing)
        return runners.run_image(ctx, name, budget, left)
    except Exception:  # one campaign's failure must not cost the others (or what this one wrote)
        warn(f"{name} failed:\n{traceback.format_exc()}")
        return -1.0


def record_plan(job: Job, timing: dict) -> None:
    """session.json's plan of the paper's tables: each row's number, the fastest step measured for it and the
    GPU minutes it still needs (with what this job's campaigns have recorded so far), and the clustering
    table's runs side by side on this card and the jobs of this wall it still takes."""
    opts, card = job.opts, job.facts.get("card")
    newer = {n: p for n in campaign.NAMES if (p := runners.read_json(opts.work / "parts" / n / campaign.PROGRESS))}
    job.facts["paper_rows"] = [asdict(r) for r in paper_rows(opts.campaigns, opts.wall, timing, newer, card)]
    clustering = newer.get("clustering") or campaign.read_progress(opts.campaigns, "clustering")
    job.facts["table"] = asdict(campaign.table_plan(clustering, opts.wall, campaign.card_bytes(card)))


# ---- the job ------------------------------------------------------------------------------------------------

WORK_MARK = ".swarmctl-job-work"  # in a work folder a job made: only such a folder (or an empty one) is emptied


def check_folders(opts: JobOptions) -> None:
    """OUT and the work folder are folders (or missing); the campaigns folder is one; the work folder, which
    the job empties, holds none of the others nor the current folder, and is empty or a job's own."""
    for what, path in (("OUT", opts.out), ("the work folder", opts.work)):
        if path.exists() and not path.is_dir():
            raise ResourceError(f"{path} is a file; {what} is a folder the job writes into: choose another path")
    if not opts.campaigns.is_dir():
        raise ResourceError(f"{opts.campaigns} is not a folder; pass the repository's campaigns folder "
                            "with `campaigns`")
    if any(p.exists() and not p.is_dir() for p in (opts.data_dir, *opts.data_dir.parents)):
        raise ResourceError(f"{opts.data_dir} is a file or lies under one; `data_dir` is the folder of the image "
                            "files (DIR/MNIST/raw/)")
    work = opts.work.resolve()
    for what, path in (("the current folder", Path.cwd()), ("OUT", opts.out), ("the campaigns folder", opts.campaigns),
                       ("the data folder", opts.data_dir)):
        if work == path.resolve() or work in path.resolve().parents:
            raise ConfigError(f"`work` {opts.work} holds {what} ({path}), and the job empties its work folder; "
                              "give a scratch folder of its own (the default .gpu-work)")
    if work.is_dir() and any(work.iterdir()) and not (work / WORK_MARK).is_file():
        raise ResourceError(f"{opts.work} is a folder with files that no job made, and the job empties its work "
                            "folder; give an empty or new folder as `work`")


def fresh_work_folder(work: Path) -> None:
    """Empty the work folder (checked by :func:`check_folders`) and mark it as a job's own."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    atomic_write_text(work / WORK_MARK, "a scratch folder of the campaign job; emptied by the next job\n")


def run_job(opts: JobOptions) -> int:
    """The whole job; returns its exit status: 0 done, 130 stopped by a signal (what finished is packed), 1
    without torch or CUDA."""
    check_folders(opts)
    campaign.plan(opts.campaigns)  # a damaged progress.json: one line, before anything is written
    stop_on_signals()
    job = Job(opts, Deadline(opts.wall))
    opts.out.mkdir(parents=True, exist_ok=True)
    fresh_work_folder(opts.work)
    job.facts = {"wall": opts.wall, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                 "smoke": opts.smoke, "phases": {}, "seconds": {}}
    started = inputs_phase(job)
    if started is None:
        return 1
    order, gen, measure = started

    t0 = time.monotonic()  # phase 1
    job.facts["gpu_tests_exit"] = None if STOPPING else gpu_tests(logs_folder(opts.work),
                                                                  min(TESTS_CAP, max(job.deadline.left() * 0.25, 5)))
    pack_logs(opts)
    graphs_ok = job.facts["gpu_tests_exit"] in (0, 5)  # 5: nothing collected (no CUDA: every test skipped)
    job.phase_done("1-gpu-tests", t0)

    t0 = time.monotonic()  # phase 2
    job.facts["timing_measured"] = measure
    timing = timing_phase(job, gen, measure)
    job.facts["timing"] = timing
    left = job.deadline.left() - PACK_RESERVE
    shares = {("image" if n in IMAGE_FOLDERS else n): campaign.share(order, i, left, opts.smoke)
              for i, (n, _) in enumerate(order)}
    device_type = "cpu" if job.facts["card"] == NO_CUDA else "cuda"
    job.facts["flags"] = flags = campaign.choose_flags(timing, graphs_ok, shares, device_type)
    log(f"step modes: {flags}")
    pack_logs(opts)
    record_plan(job, timing)
    job.phase_done("2-timings", t0)

    t0 = time.monotonic()  # phase 3
    campaigns_phase(job, order, gen, timing)
    record_plan(job, timing)
    job.phase_done("3-campaigns", t0)

    if gen is not None and gen.poll() is None:
        gen.kill()
    returned = ", ".join(sorted(p.name for p in opts.out.iterdir()))
    if STOPPING:
        warn(f"stopped by {STOPPING[0]}; returned: {returned}")
        return SIGNAL_EXIT
    log(f"done, {job.deadline.left():.0f} s left; returned: {returned}")
    return 0


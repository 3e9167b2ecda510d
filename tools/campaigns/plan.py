"""Where a campaign job's minutes go: each campaign's distance to the paper (its gap), the order and the
share of the wall each gets, which runs the clustering table still needs, and the step mode each task
trains in (from the measured step timings).

Each campaign lives in ``campaigns/NAME/`` (committed): ``progress.json`` (where it stands, every session
that moved it) and, for the image campaigns, ``last.pt`` and ``best.pt`` (model + Adam state). A job
(:mod:`tools.campaigns.job`) continues each campaign from there, and the commit
(:mod:`tools.campaigns.commit`) puts what the job returned back into the folder. The campaigns and the
paper's number each one chases (swarmctl's package data):

- ``clustering``: Table 2, the six configurations of sweeps/best.toml x its 3 seeds, one run each of
  ``minutes_per_run`` net minutes, ``side_by_side`` runs sharing the card; finished runs keep their
  config, metrics and evaluation (``swarmctl report --runs-dir campaigns/clustering/runs`` prints the table);
- ``mog``: swarm-mog (768-20-1), one run of the paper's schedule (100 epochs of 500 steps, lr x 0.1 after
  70) carried across jobs, as many epochs as each job's share allows; its last.pt (57 MB with Adam) is
  kept in parts under a job's file limit (``last.pt.partK`` and ``last.pt.parts.json``); each job scores
  the last.pt it returns on the fixed 10,000 test tasks;
- ``mnist``, then ``fashion-mnist`` once MNIST reaches the paper: swarm-image (256-10-1), resumed from
  ``last.pt`` for whatever the job's share allows; test bits/dim of ``best.pt``.

What a job returns: at most the files its ``files`` argument allows; when MoG's parts and an image campaign's
checkpoints do not fit together, they take turns (:func:`within_files`).

Where the wall goes: a campaign's gap is its relative distance to the paper's number (a clustering
configuration with no finished run counts as none yet); the campaigns run one after another, largest gap
first, each alone on the card, each given its share of the remaining wall in proportion to its gap but
leaving the later campaigns their minimum (:func:`minimum`), and what one leaves goes to the next.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from swarmctl.config import ModelConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.errors import DataError
from swarmctl.files import read_json
from swarmctl.runs import parameter_count, training_state_bytes
from swarmctl.studies.report import paper_results
from swarmctl.studies.sweep import expand, load_spec
from swarmctl.tasks import get_task
from swarmctl.training.modes import MODES, Measured, StepMode, choose_step_mode, step_timings
from tools.campaigns import IMAGES, NAMES

CAMPAIGNS = Path("campaigns")  # the repository's campaigns folder, from its root
TABLE = Path("sweeps") / "best.toml"  # the clustering table's runs, in the repository's checkout


PROGRESS = "progress.json"  # a campaign's record, in campaigns/NAME/
TIMING = "timing.json"  # the committed step timings, in the campaigns folder
LOGS = "logs.tgz"  # a job's GPU tests' and step timings' output, one returned file
PACK_RESERVE = 15.0  # seconds a job keeps at its end for packing the returned files


def read_progress(root: Path, name: str) -> dict:
    """campaigns/NAME/progress.json (a campaign never moved: an empty record); a damaged one is a DataError."""
    path = root / name / PROGRESS
    if not path.is_file():
        return {"campaign": name, "sessions": []}
    try:
        progress = read_json(path, "a campaign's progress record")
    except DataError:
        progress = None
    if not isinstance(progress, dict) or not isinstance(progress.get("sessions", []), list):
        raise DataError(f"{path} is damaged (not a JSON progress record); restore it (git checkout {path}) first")
    return progress


def image_target(dataset: str) -> float:
    """The paper's test bits/dim of swarm-image on ``dataset``."""
    return next(r["reported"] for r in paper_results()["rows"] if r.get("dataset") == dataset)


def mog_target() -> float:
    """The paper's test log-likelihood per point of swarm-mog (768-20-1)."""
    return next(r["reported"] for r in paper_results()["rows"] if (r["model"], r["code"]) == ("swarm-mog", "768-20-1"))


# ---- the clustering table: which runs it needs -----------------------------------------------------------

FLAGS = {"dim_hidden": "--hidden", "n_iter": "--iters", "n_layers": "--layers", "n_inducing": "--inducing"}
SMOKE_SIZES = {"swarm": ["--hidden", "8", "--iters", "2"], "set-transformer": ["--hidden", "8", "--inducing", "4",
                                                                               "--heads", "2", "--layers", "1"]}


def table_spec() -> Path:
    """The clustering table's spec: sweeps/best.toml of the checkout these tools are in, so that the campaign
    commands also find it outside the repository's root, else of the current folder."""
    for path in (Path(__file__).resolve().parents[2] / TABLE, TABLE):
        if path.is_file():
            return path
    raise DataError(f"{TABLE} (the clustering table's runs) is neither in this checkout nor here; run from "
                    "the repository's root")


def table_runs(smoke: bool = False) -> list[dict]:
    """Every run of sweeps/best.toml, seed-major (all configurations of seed 0 first): name, model, code,
    seed, train options (tiny ones with ``smoke``) and its model config (the table's sizes)."""
    out = []
    for run in expand(load_spec(table_spec())):
        cfg = run.model
        opts = [x for field, flag in FLAGS.items() if getattr(cfg, field) is not None
                for x in (flag, str(getattr(cfg, field)))]
        if smoke:
            opts = SMOKE_SIZES.get(cfg.name, ["--hidden", "8", "--layers", "1"])
        code = run.name[len(cfg.name) + 1 : run.name.rindex("-s")]
        out.append({"name": run.name, "model": cfg.name, "code": code, "seed": run.seed, "options": opts,
                    "config": cfg})
    return out


# ---- the clustering table on one card: how many runs side by side, how many jobs ---------------------------

CONTEXT_BYTES = 1 << 30  # one training process's CUDA context and allocator reserve (estimate)
ACTIVATION_FLOATS = 12  # floats kept for the backward pass per hidden unit, point and step (estimate: LSTM gates,
# states and their pointwise results)
CARD_FILL = 0.9  # of the card's memory the runs side by side may plan for
GROUP_RESERVE = 60.0  # after a group of runs: the validation split's evaluation, the copies
TABLE_JOB_OVERHEAD = 60.0  # of a job's wall before and after its campaigns: phases 0-1 (32 s on an H200), packing


def table_run_bytes(model_cfg: ModelConfig, batch: int, points: int) -> int:
    """Estimated memory of one clustering run of the table on the card: its process's context, its training
    state (weights, gradients, Adam: :func:`swarmctl.runs.training_state_bytes`) and the activations of a
    batch of ``batch`` sets of ``points`` points kept for the backward pass (:data:`ACTIVATION_FLOATS` floats
    per hidden unit, point and step; the steps: iterations x layers)."""
    depth = (model_cfg.n_iter or 1) * (model_cfg.n_layers or 1)
    activations = batch * points * (model_cfg.dim_hidden or 1) * depth * ACTIVATION_FLOATS * 4
    return CONTEXT_BYTES + training_state_bytes(parameter_count(model_cfg)) + activations


def fit_side_by_side(run_bytes: list[int], card_bytes: float) -> int:
    """How many of the table's runs fit on a card of ``card_bytes`` at once: :data:`CARD_FILL` of it over
    the largest run's memory, at least one, at most every run."""
    if not run_bytes:
        return 0
    return max(1, min(len(run_bytes), int(card_bytes * CARD_FILL // max(run_bytes))))


def group_seconds(minutes_per_run: float, smoke: bool = False) -> float:
    """A job's seconds for one group of runs side by side: their net minutes (plus a fifth for validation),
    start-up, the evaluation and the copies."""
    return GROUP_RESERVE + (150.0 if smoke else minutes_per_run * 60 * 1.2 + 30)


def table_jobs(runs_left: int, side: int, minutes_per_run: float, wall: float) -> int | None:
    """Jobs of ``wall`` seconds (the table alone on the card) that finish ``runs_left`` runs, ``side`` at once;
    None when not one group fits in a job."""
    if runs_left <= 0:
        return 0
    per_job = int((wall - TABLE_JOB_OVERHEAD) // group_seconds(minutes_per_run))
    if per_job < 1 or side < 1:
        return None
    groups = -(-runs_left // side)
    return -(-groups // per_job)


def card_bytes(card: str | None) -> float | None:
    """The card's memory from its description (``NAME, 140 GiB, 132 SMs``), None when it says none."""
    found = re.search(r"([0-9.]+) GiB", card or "")
    return float(found.group(1)) * 2**30 if found else None


@dataclass(frozen=True)
class TablePlan:
    """The clustering table's plan: its runs, how many are left, how many fit side by side on the card (by
    memory) and how many a job runs at once (the campaign's ``side_by_side``, at most what fits), and the
    jobs of ``wall`` seconds it still takes with the card to itself."""

    runs: int
    runs_left: int
    run_gib: float  # the largest run's estimated memory
    fit: int | None  # runs whose memory fits on the card at once (None: the card's memory is not known)
    side: int  # runs a job trains at once
    minutes_per_run: float
    group_s: float
    wall: float
    jobs: int | None  # None: not one group fits in a job of ``wall`` seconds


def table_plan(progress: dict, wall: float, card: float | None) -> TablePlan:
    """The clustering table's plan from its progress (``minutes_per_run``, ``side_by_side``, the finished
    runs) for jobs of ``wall`` seconds on a card of ``card`` bytes."""
    runs = table_runs()
    left = sum(1 for r in runs if r["name"] not in progress.get("runs", {}))
    batch, points = get_task("clustering").defaults.batch_size, ClusteringParams().n_max
    sizes = [table_run_bytes(r["config"], batch, points) for r in runs]
    fit = None if card is None else fit_side_by_side(sizes, card)
    per_run = float(progress.get("minutes_per_run", 4.0))
    side = int(progress.get("side_by_side", 3)) if fit is None else min(int(progress.get("side_by_side", 3)), fit)
    return TablePlan(len(runs), left, max(sizes) / 2**30, fit, side, per_run, group_seconds(per_run), wall,
                     table_jobs(left, side, per_run, wall))


def clustering_gap(progress: dict) -> float | None:
    """Mean over the table's configurations of the relative gap of the mean over finished seeds; a
    configuration with no finished run counts as none (its gap is not known yet), so the table fills what
    the campaigns with a measured gap leave (at least 0.01 while runs are left). None once every run is
    finished."""
    runs = progress.get("runs", {})
    rows = table_runs()
    if all(r["name"] in runs for r in rows):
        return None
    papers = {(r["model"], r["code"]): r["loss"] for r in paper_results()["rows"] if r["task"] == "clustering"}
    gaps = []
    for key, target in papers.items():
        done = [v["eval_loss"] for v in runs.values() if (v["model"], v["code"]) == key and v.get("eval_loss")]
        gaps.append(max(0.0, sum(done) / len(done) / target - 1) if done else 0.0)
    return max(sum(gaps) / len(gaps), 0.01)  # runs left: never nothing


def gap(root: Path, name: str) -> float | None:
    """Relative distance of the campaign's number to the paper's; None when met (or not yet started:
    Fashion-MNIST waits for MNIST)."""
    p = read_progress(root, name)
    if name == "clustering":
        return clustering_gap(p)
    if name == "mog":
        ll = p.get("best_log_likelihood", p.get("start_log_likelihood"))
        g = 1.0 if ll is None else (mog_target() - ll) / abs(mog_target())
    else:
        if name == "fashion-mnist" and gap(root, "mnist") is not None:
            return None
        bits = p.get("best_bits_per_dim", p.get("start_bits_per_dim"))
        g = 1.0 if bits is None else bits / image_target(name) - 1
    return g if g > 0 else None


def plan(root: Path) -> list[tuple[str, float]]:
    """The campaigns still short of the paper, largest gap first."""
    gaps = [(n, g) for n in NAMES if (g := gap(root, n)) is not None]
    return sorted(gaps, key=lambda t: -t[1])


def share(gaps: list[tuple[str, float]], i: int, seconds: float, smoke: bool = False) -> float:
    """Campaign i's part of ``seconds`` (what is left for campaigns i, i+1, ...): in proportion to its gap,
    but leaving the later campaigns their minimum (:func:`minimum`; the clustering table, last, reserves
    nothing: it runs only when a whole group fits)."""
    rest = sum(g for _, g in gaps[i:])
    part = seconds * gaps[i][1] / rest if rest > 0 else seconds
    later = sum(minimum(n, smoke) for n, _ in gaps[i + 1 :] if n != "clustering")
    return max(min(part, seconds - later), 0.0)


# ---- what a job returns: at most its ``files`` files, each of at most its ``file_mib`` MiB ----------------

FIXED_FILES = ("session.json", "logs.tgz")  # every job's: its record, and the GPU tests' and timings' output
MOG_PARTS = 4  # swarm-mog 768-20-1's last.pt with Adam (57 MB) comes back in 4 parts (each within a file's limit)


def returned_files(name: str) -> int:
    """The files campaign ``name`` returns: NAME.tgz, and MoG's last.pt in :data:`MOG_PARTS` parts (their
    manifest inside mog.tgz), an image campaign's NAME-last.pt and NAME-best.pt."""
    return 1 + (MOG_PARTS if name == "mog" else 2 if name in IMAGES else 0)


def within_files(order: list[tuple[str, float]], root: Path, limit: int) -> tuple[list[tuple[str, float]], list[str]]:
    """The campaigns of ``order`` whose files fit in the ``limit`` files a job returns with :data:`FIXED_FILES`, and
    those left to a later job. While they do not fit, the campaign that returns checkpoints (MoG's parts, an image
    campaign's) with the most committed sessions waits (ties: the smaller gap), so MoG and MNIST take turns."""
    keep = list(order)
    while len(FIXED_FILES) + sum(returned_files(n) for n, _ in keep) > limit:
        heavy = [i for i, (n, _) in enumerate(keep) if returned_files(n) > 1] or list(range(len(keep)))
        drop = max(heavy, key=lambda i: (len(read_progress(root, keep[i][0])["sessions"]), i))
        keep.pop(drop)
    left = [n for n, _ in order if n not in dict(keep)]
    return keep, left


IMAGE_RESERVE = 60.0  # after an image campaign's training: the 10,000 test images, the samples, the copies
IMAGE_MIN_TRAIN = 120.0  # seconds of training an image campaign gets at least (net of validation)
MOG_RESERVE = 45.0  # around a MoG run: start-up, the 10,000 fixed test tasks, the copies
MOG_MIN_EPOCHS = 5
MOG_EPOCHS, MOG_STEPS = 100, 500  # the paper's MoG schedule: 100 epochs of 500 steps


def minimum(name: str, smoke: bool = False) -> float:
    """Seconds below which campaign ``name`` does not start (its start-up and scoring, plus a first unit of
    work: two minutes of image training, five MoG epochs at the slowest eager step measured on a card)."""
    if smoke:
        return 30.0
    if name in IMAGES:
        return IMAGE_RESERVE + 20 + IMAGE_MIN_TRAIN * 1.2
    if name == "mog":
        return MOG_RESERVE + MOG_MIN_EPOCHS * 550 * slowest_eager("mog")
    return 0.0



# ---- which step mode each task trains in ------------------------------------------------------------------

KEYS = {"clustering": "clustering_s_per_epoch", "mog": "mog_ms_per_step", "image": "image_s_per_epoch"}
STEPS = {"clustering": 90, "mog": 1, "image": 1200}  # steps per unit the timing key is measured in
SCALE = {"clustering": 1.0, "mog": 1e-3, "image": 1.0}  # the unit in seconds
_TIMED_PARTS = {"bf16": "amp", "bf16-autocast": "amp", "amp": "amp", "graphs": "graphs", "compile": "compile",
                "triton": "triton"}


def trainer_mode(timed: str) -> str | None:
    """The `swarmctl train --step` mode a step-timing name measures (``tf32`` is the trainer's float32 on
    CUDA, ``bf16-autocast`` its ``amp``, ``triton`` its Triton cell); None for a mode the trainer does not
    offer (fp32)."""
    parts = set(timed.split("+")) - {"tf32", "eager"}
    if not parts <= set(_TIMED_PARTS):
        return None
    name = StepMode(**{_TIMED_PARTS[p]: True for p in parts}).name
    return name if name in MODES else None


def measured_modes(timing: dict, task: str) -> dict[str, Measured]:
    """Each mode of ``task`` that a job's step timings measured, as the trainer's choice reads it: seconds per
    step and start-up seconds (the warm-up and capture the timing recorded; compile: the cold-compile probe's
    compile seconds and its steady step). Only the modes the task lists as proven (``Task.proven_modes``: a
    bf16 mode where its loss agrees with float32's, graphs where the GPU tests pin them)."""
    proven = get_task(task).proven_modes
    warm = timing.get("warmup_s") or {}
    out: dict[str, Measured] = {}
    for timed, t in (timing.get(KEYS[task]) or {}).items():
        mode = trainer_mode(timed)
        if mode is None or mode not in proven or not isinstance(t, (int, float)) or t <= 0 or mode in out:
            continue
        start = warm.get(f"{task}/{timed}")
        out[mode] = Measured(t * SCALE[task] / STEPS[task], float(start) if isinstance(start, (int, float))
                             and start > 0 else 0.0)
    for mode in ("compile", "amp+compile"):
        found = _compiled(timing, task, mode) if mode in proven else None
        if found is not None:
            out[mode] = found
    return out


def _compiled(timing: dict, task: str, mode: str) -> Measured | None:
    """A compiled ``mode`` (``compile`` or ``amp+compile``) as its finished cold-compile probe measured it: its
    steady step, and its compile seconds (warm-up included) as the start-up; None without such a probe."""
    probe = compile_probe(timing, task, amp=MODES[mode].amp)
    steady = probe.get("steady_ms_per_step", probe.get("steady_s_per_epoch"))
    compile_s, warm = probe.get("compile_s"), probe.get("warmup_s")
    if not (probe.get("finished") is True and _seconds(steady) and steady > 0 and _seconds(compile_s)):
        return None
    unit = 1e-3 if "steady_ms_per_step" in probe else 1.0 / STEPS[task]
    return Measured(steady * unit, float(compile_s) + (float(warm) if _seconds(warm) else 0.0))


def _seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def shipped_modes(timing: dict, task: str) -> dict[str, Measured]:
    """The proven modes of ``task`` in the step timings shipped with swarmctl for the job's card (its
    ``device`` name), as `train --step auto` reads them; empty for a card they do not name."""
    device = timing.get("device") if isinstance(timing.get("device"), dict) else {}
    card = step_timings().get(str(device.get("name")))
    return card.measured(task, get_task(task).proven_modes) if card else {}


def slowest_eager(task: str) -> float:
    """The slowest eager step of ``task`` among the cards of the shipped step timings: what sizes its work on a
    card whose own step is not known."""
    return max(card.tasks[task]["eager"].step_seconds for card in step_timings().values() if task in card.tasks)


def measurement(timing: dict, task: str, mode: str) -> Measured | None:
    """``mode``'s step and start-up seconds for ``task``: this job's timings, else the shipped ones of its card
    (what the choice read); None when neither has it."""
    return measured_modes(timing, task).get(mode) or shipped_modes(timing, task).get(mode)


def step_of(timing: dict, task: str, mode: str) -> Measured:
    """``mode``'s measurement for ``task`` (:func:`measurement`), else its eager step's, else the slowest eager
    step of any card (:func:`slowest_eager`)."""
    return measurement(timing, task, mode) or measurement(timing, task, "eager") or Measured(slowest_eager(task))


def step_seconds(timing: dict, task: str) -> dict[str, float]:
    """Seconds per step of each measured mode of ``task`` (:func:`measured_modes`)."""
    return {mode: m.step_seconds for mode, m in measured_modes(timing, task).items()}


def probe_key(probe: dict) -> str:
    """Where a cold-compile probe is kept in ``compile_probes``: its task, ``+amp`` for the bf16 step."""
    return f"{probe.get('task')}{'+amp' if probe.get('amp') else ''}"


def compile_probe(timing: dict, task: str, amp: bool = False) -> dict:
    """The finished cold-compile probe of ``task`` (of its bf16 autocast step with ``amp``): this job's
    (``compile_probe``), else the one kept in ``compile_probes``; empty when none was."""
    key = probe_key({"task": task, "amp": amp})
    probe = timing.get("compile_probe")
    if isinstance(probe, dict) and probe_key(probe) == key and probe.get("finished") is True:
        return probe
    kept = timing.get("compile_probes")
    probe = kept.get(key) if isinstance(kept, dict) else None
    return probe if isinstance(probe, dict) else {}


def keep_probes(timing: dict, earlier: dict) -> dict:
    """``timing`` (a job's new step timings, maybe with its own ``compile_probe``) with ``compile_probes``: the
    finished probes of the ``earlier`` timings (kept there, or an older file's own ``compile_probe``) that
    were measured on this job's card and torch, and this job's own in its place when it finished. A job
    probes one compile; the others' numbers must outlive its commit, but never beside another card's."""
    device = timing.get("device") if isinstance(timing.get("device"), dict) else {}
    kept = earlier.get("compile_probes") if isinstance(earlier.get("compile_probes"), dict) else {}
    older = [earlier.get("compile_probe"), *kept.values(), timing.get("compile_probe")]
    probes = {}
    for probe in older:  # in this order: a later one replaces an earlier one of the same key
        if isinstance(probe, dict) and probe.get("finished") is True and device.get("name") \
                and (probe.get("device"), probe.get("torch")) == (device.get("name"), device.get("torch")):
            probes[probe_key(probe)] = probe
    return {**timing, "compile_probes": probes} if probes else timing


def choose_modes(timing: dict, graphs_ok: bool, shares: dict[str, float], device_type: str = "cuda") -> dict[str, str]:
    """Each task's (of ``shares``) step mode for the seconds it will train, chosen by the trainer's own rule
    (:func:`swarmctl.training.modes.choose_step_mode`: the most steps in the budget, start-up counted) among
    the modes the job's timings measured (none measured: the shipped timings of its card, as `train --step
    auto` reads them; eager on a card they do not name); the CUDA-graph modes only when the GPU tests passed."""
    modes: dict[str, str] = {}
    for task in (t for t in KEYS if t in shares):
        measured = measured_modes(timing, task) or shipped_modes(timing, task)
        if not graphs_ok:
            measured = {m: v for m, v in measured.items() if not MODES[m].graphs}
        modes[task] = choose_step_mode("auto", device_type, measured, shares.get(task, 0.0)).mode.name
    return modes


def choose_flags(timing: dict, graphs_ok: bool, shares: dict[str, float],
                 device_type: str = "cuda") -> dict[str, list[str]]:
    """The `swarmctl train` options of :func:`choose_modes`: ``--step MODE`` per task."""
    return {task: ["--step", mode] for task, mode in choose_modes(timing, graphs_ok, shares, device_type).items()}

"""Where a campaign job's minutes go: each campaign's distance to the paper (its gap), the order and the
share of the wall each gets, which runs the clustering table still needs, and the step mode each task
trains in (from the measured step timings).

Each campaign lives in ``campaigns/NAME/`` (committed): ``progress.json`` (where it stands, every session
that moved it) and, for the image campaigns, ``last.pt`` and ``best.pt`` (model + Adam state). A job
(:mod:`swarmctl.campaigns.job`) continues each campaign from there, and the commit
(:mod:`swarmctl.campaigns.commit`) puts what the job returned back into the folder. The campaigns and the
paper's number each one chases (swarmctl's package data):

- ``clustering``: Table 2, the six configurations of sweeps/best.toml x its 3 seeds, one run each of
  ``minutes_per_run`` net minutes, ``side_by_side`` runs sharing the card; finished runs keep their
  config, metrics and evaluation (``swarmctl report campaigns/clustering/runs`` prints the table);
- ``mog``: swarm-mog (768-20-1), the paper's schedule (100 epochs of 500 steps, lr x 0.1 after 70) or as
  many epochs of it as the job's share allows; the test log-likelihood on the fixed 10,000 tasks.
  Its checkpoint (57 MB with Adam) is over what one returned file may hold, so a MoG run is one job;
- ``mnist``, then ``fashion-mnist`` once MNIST reaches the paper: swarm-image (256-10-1), resumed from
  ``last.pt`` for whatever the job's share allows; test bits/dim of ``best.pt``.

Where the wall goes: a campaign's gap is its relative distance to the paper's number (a clustering
configuration with no finished run counts as none yet); the campaigns run one after another, largest gap
first, each alone on the card, each given its share of the remaining wall in proportion to its gap but
leaving the later campaigns their minimum (:func:`minimum`), and what one leaves goes to the next.
"""

from __future__ import annotations

import json
from pathlib import Path

from swarmctl.campaigns import IMAGES, NAMES
from swarmctl.errors import DataError
from swarmctl.files import read_bytes
from swarmctl.studies.report import paper_results
from swarmctl.studies.sweep import expand, load_spec

CAMPAIGNS = Path("campaigns")  # the repository's campaigns folder, from its root
TABLE = Path("sweeps") / "best.toml"  # the clustering table's runs, from the repository's root


PROGRESS = "progress.json"  # a campaign's record, in campaigns/NAME/


def read_progress(root: Path, name: str) -> dict:
    """campaigns/NAME/progress.json (a campaign never moved: an empty record); a damaged one is a DataError."""
    path = root / name / PROGRESS
    if not path.is_file():
        return {"campaign": name, "sessions": []}
    try:
        progress = json.loads(read_bytes(path))
        if not isinstance(progress, dict) or not isinstance(progress.get("sessions", []), list):
            raise ValueError("not a progress record")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is damaged ({' '.join(str(exc).split())[:80]}); restore it "
                        f"(git checkout {path}) first") from None
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


def table_runs(smoke: bool = False) -> list[dict]:
    """Every run of sweeps/best.toml, seed-major (all configurations of seed 0 first): name, model, code,
    seed, train options (tiny ones with ``smoke``)."""
    out = []
    for run in expand(load_spec(TABLE)):
        cfg = run.model
        opts = [x for field, flag in FLAGS.items() if getattr(cfg, field) is not None
                for x in (flag, str(getattr(cfg, field)))]
        if smoke:
            opts = SMOKE_SIZES.get(cfg.name, ["--hidden", "8", "--layers", "1"])
        code = run.name[len(cfg.name) + 1 : run.name.rindex("-s")]
        out.append({"name": run.name, "model": cfg.name, "code": code, "seed": run.seed, "options": opts})
    return out


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


IMAGE_RESERVE = 60.0  # after an image campaign's training: the 10,000 test images, the samples, the copies
IMAGE_MIN_TRAIN = 120.0  # seconds of training an image campaign gets at least (net of validation)
MOG_RESERVE = 45.0  # around a MoG run: start-up, the 10,000 fixed test tasks, the copies
MOG_MIN_EPOCHS = 5
MOG_EPOCHS, MOG_STEPS = 100, 500  # the paper's MoG schedule: 100 epochs of 500 steps


def minimum(name: str, smoke: bool = False) -> float:
    """Seconds below which campaign ``name`` does not start (its start-up and scoring, plus a first unit of
    work: two minutes of image training, five MoG epochs at the eager speed of an earlier H200)."""
    if smoke:
        return 30.0
    if name in IMAGES:
        return IMAGE_RESERVE + 20 + IMAGE_MIN_TRAIN * 1.2
    if name == "mog":
        return MOG_RESERVE + MOG_MIN_EPOCHS * 550 * 0.0164
    return 0.0



# ---- which step mode each task trains in ------------------------------------------------------------------

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

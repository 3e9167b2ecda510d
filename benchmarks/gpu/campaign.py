"""Campaigns: training that continues from one GPU job to the next (campaigns/README.md).

Each campaign lives in ``campaigns/NAME/`` (committed): ``progress.json`` (where it stands, every session
that moved it) and, for the image campaigns, ``last.pt`` and ``best.pt`` (model + Adam state). A session
(session.py) continues each campaign from there, and ``commit_session.py`` puts what the session returned
back into the folder. The campaigns and the paper's number each one chases (swarmctl's package data):

- ``clustering``: Table 2, the six configurations of sweeps/best.toml x its 3 seeds, one run each of
  ``minutes_per_run`` net minutes, ``side_by_side`` runs sharing the card; finished runs keep their
  config, metrics and evaluation (``swarmctl report campaigns/clustering/runs`` prints the table);
- ``mog``: swarm-mog (768-20-1), the paper's schedule (100 epochs of 500 steps, lr x 0.1 after 70) or as
  many epochs of it as the session's share allows; the test log-likelihood on the fixed 10,000 tasks.
  Its checkpoint (57 MB with Adam) is over what one returned file may hold, so a MoG run is one job;
- ``mnist``, then ``fashion-mnist`` once MNIST reaches the paper: swarm-image (256-10-1), resumed from
  ``last.pt`` for whatever the session's share allows; test bits/dim of ``best.pt``.

Where the wall goes: a campaign's gap is its relative distance to the paper's number (a clustering
configuration with no finished run counts as none yet); the campaigns run one after another, largest gap
first, each alone on the card, each given its share of the remaining wall in proportion to its gap but
leaving the later campaigns their minimum (:func:`minimum`), and what one leaves goes to the next.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from _common import REPO, Deadline, export_run, finish, log, start, summary

CAMPAIGNS = REPO / "campaigns"
IMAGES = ("mnist", "fashion-mnist")
NAMES = ("clustering", "mog", *IMAGES)


def paper() -> dict:
    sys.path.insert(0, str(REPO))
    from swarmctl.studies.report import paper_results

    return paper_results()


def read_progress(root: Path, name: str) -> dict:
    path = root / name / "progress.json"
    return json.loads(path.read_text()) if path.is_file() else {"campaign": name, "sessions": []}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def image_target(dataset: str) -> float:
    """The paper's test bits/dim of swarm-image on ``dataset``."""
    return next(r["reported"] for r in paper()["rows"] if r.get("dataset") == dataset)


def mog_target() -> float:
    """The paper's test log-likelihood per point of swarm-mog (768-20-1)."""
    return next(r["reported"] for r in paper()["rows"] if (r["model"], r["code"]) == ("swarm-mog", "768-20-1"))


# ---- the clustering table: which runs it needs -----------------------------------------------------------

FLAGS = {"dim_hidden": "--hidden", "n_iter": "--iters", "n_layers": "--layers", "n_inducing": "--inducing"}
SMOKE_SIZES = {"swarm": ["--hidden", "8", "--iters", "2"], "set-transformer": ["--hidden", "8", "--inducing", "4",
                                                                               "--heads", "2", "--layers", "1"]}


def table_runs(smoke: bool = False) -> list[dict]:
    """Every run of sweeps/best.toml, seed-major (all configurations of seed 0 first): name, model, code,
    seed, train options (tiny ones with ``smoke``)."""
    sys.path.insert(0, str(REPO))
    from swarmctl.studies.sweep import expand, load_spec

    out = []
    for run in expand(load_spec(REPO / "sweeps" / "best.toml")):
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
    papers = {(r["model"], r["code"]): r["loss"] for r in paper()["rows"] if r["task"] == "clustering"}
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


# ---- the runners: each trains within its budget and leaves what to keep in PARTS/NAME -------------------

class Context:
    """What every runner needs: the campaigns folder, the work and output folders, the step modes."""

    def __init__(self, root: Path, work: Path, out: Path, smoke: bool, flags: dict[str, list[str]],
                 data_dir: str, clustering_data: Path, wait_for_data, card: str) -> None:
        self.root, self.work, self.out, self.smoke, self.flags = root, work, out, smoke, flags
        self.data_dir, self.clustering_data, self.wait_for_data = data_dir, clustering_data, wait_for_data
        self.card = card

    def parts(self, name: str) -> Path:
        path = self.work / "parts" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _session_record(ctx: Context, seconds: float, **facts) -> dict:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "card": ctx.card,
            "wall_seconds": round(seconds, 1), **facts}


def run_image(ctx: Context, name: str, budget: float, left: float) -> float:
    """Continue (or start) the image campaign ``name`` for about ``budget`` seconds."""
    t0 = time.monotonic()
    reserve = 20.0 if ctx.smoke else IMAGE_RESERVE
    budget = min(max(budget, minimum(name, ctx.smoke)), left)
    if budget <= reserve + 5:
        log(f"{name}: no time left")
        return 0.0
    deadline = Deadline(budget)
    camp, runs, parts = ctx.root / name, ctx.work / "runs", ctx.parts(name)
    run_dir = runs / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    progress = read_progress(ctx.root, name)
    minutes = max(deadline.left() - reserve - 20, 6) / 60 / 1.2  # each epoch validates on the test split
    minutes = 5.0 if ctx.smoke else minutes  # smoke: the epochs bound it
    common = ["--runs-dir", str(runs)]
    if (camp / "last.pt").is_file():  # the run folder is rebuilt from the committed files
        import torch

        ckpt = torch.load(camp / "last.pt", map_location="cpu", weights_only=True)
        (run_dir / "config.json").write_text(json.dumps(ckpt["config"], indent=2) + "\n")
        for src in ("last.pt", "best.pt", "metrics.jsonl"):
            if (camp / src).is_file():
                shutil.copy2(camp / src, run_dir / src)
        done, epoch = ckpt["state"]["net_seconds"] / 60, ckpt["state"]["epoch"]
        args = ["train", "swarm-image", "--resume", name, *common, "--minutes", f"{done + minutes:.2f}"]
        if ctx.smoke:
            args += ["--max-epochs", str(epoch + 1)]
    else:
        epoch = 0
        size = ["--hidden", "8", "--iters", "2", "--max-epochs", "2"] if ctx.smoke else \
            ["--hidden", "256", "--iters", "10", "--layers", "1", "--max-epochs", "100000"]
        args = ["train", "swarm-image", "--dataset", name, "--data-dir", ctx.data_dir, *size, "--name", name, *common,
                "--minutes", f"{minutes:.2f}", *ctx.flags.get("image", [])]
    facts = {"train_exit": finish(start(args, parts / "train.txt"), deadline.left() - reserve + 20)}
    facts["eval_exit"] = finish(start(["eval", name, *common], parts / "eval.txt"), deadline.left() - 15)
    if deadline.left() > 30:
        facts["sample_exit"] = finish(start(["sample", "--run", name, "--dataset", name, *common, "--out",
                                             str(run_dir / "samples.png")], parts / "sample.txt"), deadline.left() - 10)
    export_run(run_dir, parts)
    if (run_dir / "samples.png").is_file():
        shutil.copy2(run_dir / "samples.png", parts / "samples.png")
    for pt in ("last.pt", "best.pt"):  # beside the archive: each is one returned file (13 MB)
        if (run_dir / pt).is_file():
            shutil.copy2(run_dir / pt, ctx.out / f"{name}-{pt}")
    s = summary(run_dir)
    res = json.loads((run_dir / "eval-test.json").read_text()) if (run_dir / "eval-test.json").is_file() else {}
    bits = res.get("bits_per_dim")
    if bits is not None and bits < progress.get("best_bits_per_dim", float("inf")):
        progress["best_bits_per_dim"] = bits
    progress.update({"epochs": s["epochs"], "net_minutes": round(s["net_seconds"] / 60, 2),
                     "target_bits_per_dim": image_target(name)})
    used = time.monotonic() - t0
    progress["sessions"].append(_session_record(ctx, used, epochs=[epoch, s["epochs"]], test_bits_per_dim=bits,
                                                median_epoch_s=s.get("median_epoch_s"), **facts))
    write_json(parts / "progress.json", progress)
    return used


def run_mog(ctx: Context, budget: float, left: float, step_seconds: float | None) -> float:
    """As many epochs of the paper's MoG schedule as ``budget`` allows (all 100 when it does);
    ``step_seconds``: the measured step of the mode it trains in."""
    t0 = time.monotonic()
    steps, val = (3, 2) if ctx.smoke else (500, 100)
    reserve = 60.0 if ctx.smoke else MOG_RESERVE  # start-up, the 10,000 test tasks (smoke: generating 20), copies
    step_s = step_seconds or 0.0164  # 16.4 ms: eager, H200 (benchmarks/RESULTS.md)
    per_epoch = (steps + val * 0.5) * step_s * 1.1  # a validation batch: forward only
    fit = lambda seconds: int((seconds - reserve) / per_epoch)  # noqa: E731
    epochs = 2 if ctx.smoke else min(100, fit(budget))
    if not ctx.smoke and epochs < MOG_MIN_EPOCHS:  # the share already leaves the later campaigns theirs
        log(f"mog: {budget:.0f} s hold fewer than {MOG_MIN_EPOCHS} epochs at {step_s * 1e3:.1f} ms/step; skipped")
        return 0.0
    wall = min(left, reserve + epochs * per_epoch * 1.15)
    deadline = Deadline(wall)
    runs, parts = ctx.work / "runs", ctx.parts("mog")
    progress = read_progress(ctx.root, "mog")
    name = f"swarm-mog-{len(progress['sessions']) + 1}"
    size = ["--hidden", "8", "--iters", "2", "--steps-per-epoch", "3", "--val-batches", "2"] if ctx.smoke else \
        ["--hidden", "768", "--iters", "20", "--layers", "1"]
    minutes = 5.0 if ctx.smoke else max(deadline.left() - reserve, 6) / 60  # smoke: the epochs bound it
    args = ["train", "swarm-mog", *size, "--max-epochs", str(epochs), "--lr-decay-epoch",
            str(max(1, round(0.7 * epochs))), "--minutes", f"{minutes:.2f}", "--runs-dir", str(runs), "--name", name,
            *ctx.flags.get("mog", [])]
    facts = {"train_exit": finish(start(args, parts / "train.txt"), deadline.left() - reserve + 20)}
    test = []
    if ctx.smoke:
        facts["gen_exit"] = finish(start(["gen-data", "--kind", "mog4", "--tasks", "20", "--out",
                                          str(ctx.work / "mog-test.h5"), "--force"], parts / "gen.txt"), 60)
        test = ["--data", str(ctx.work / "mog-test.h5")]
    facts["eval_exit"] = finish(start(["eval", name, "--runs-dir", str(runs), *test], parts / "eval.txt"),
                                deadline.left() - 5)
    export_run(runs / name, parts / "runs" / name)
    res_path = runs / name / "eval-test.json"
    res = json.loads(res_path.read_text()) if res_path.is_file() else {}
    ll = res.get("log_likelihood")
    if ll is not None and ll > progress.get("best_log_likelihood", -float("inf")):
        progress["best_log_likelihood"] = ll
    progress["target_log_likelihood"] = mog_target()
    s = summary(runs / name)
    used = time.monotonic() - t0
    progress["sessions"].append(_session_record(ctx, used, run=name, epochs=s["epochs"], planned_epochs=epochs,
                                                steps_per_epoch=steps, test_log_likelihood=ll,
                                                oracle_log_likelihood=res.get("oracle_log_likelihood"),
                                                ms_per_step=round(step_s * 1e3, 2), **facts))
    write_json(parts / "progress.json", progress)
    return used


def run_clustering(ctx: Context, budget: float, left: float) -> float:
    """The next groups of the table's runs that fit ``budget`` (at least one group when ``left`` holds it)."""
    t0 = time.monotonic()
    progress = read_progress(ctx.root, "clustering")
    progress.setdefault("runs", {})
    per_run = progress.setdefault("minutes_per_run", 4.0)
    side = progress.setdefault("side_by_side", 3)
    side = min(side, 2) if ctx.smoke else side  # smoke: a small CPU runs two at once
    todo = [r for r in table_runs(ctx.smoke) if r["name"] not in progress["runs"]]
    reserve = 60.0  # the validation split's evaluation, the copies
    group_s = reserve + (150.0 if ctx.smoke else per_run * 60 * 1.2 + 30)
    groups = max(1, int(budget // group_s)) if left >= group_s else 0
    groups = min(groups, 1) if ctx.smoke else groups  # smoke: one group per session, whatever the machine's speed
    if groups == 0 or not todo:
        log(f"clustering: a group of runs needs {group_s:.0f} s, {left:.0f} s are left; skipped")
        return 0.0  # nothing ran: nothing to pack
    runs, parts = ctx.work / "runs", ctx.parts("clustering")
    ran = []
    for _ in range(groups):
        group, todo = todo[:side], todo[side:]
        if not group or time.monotonic() - t0 + group_s > left:
            break
        if not ctx.wait_for_data():
            log("clustering: the seed-0 data could not be generated")
            break
        deadline = Deadline(group_s)
        procs = {}
        for r in group:
            extra = ["--max-epochs", "1"] if ctx.smoke else []
            flags = ctx.flags.get("clustering", []) if r["model"] == "swarm" else []
            procs[r["name"]] = start(["train", r["model"], *r["options"], "--seed", str(r["seed"]), "--minutes",
                                      f"{per_run:.2f}", "--data", str(ctx.clustering_data), "--runs-dir", str(runs),
                                      "--name", r["name"], *extra, *flags], parts / f"train-{r['name']}.txt")
        codes = {n: finish(p, deadline.left() - reserve) for n, p in procs.items()}
        evals = {n: start(["eval", n, "--runs-dir", str(runs)], parts / f"eval-{n}.txt") for n in procs}
        for r in group:
            n = r["name"]
            eval_exit = finish(evals[n], deadline.left() - 5)
            res_path = runs / n / "eval-val.json"
            if codes[n] == 0 and eval_exit == 0 and res_path.is_file():  # only finished runs are kept
                export_run(runs / n, parts / "runs" / n, weights_name="weights.pt" if r["model"] == "swarm" else None)
                s = summary(runs / n)
                progress["runs"][n] = {"model": r["model"], "code": r["code"], "seed": r["seed"],
                                       "eval_loss": json.loads(res_path.read_text())["loss"], "epochs": s["epochs"],
                                       "net_minutes": round(s["net_seconds"] / 60, 2),
                                       "median_epoch_s": s.get("median_epoch_s")}
                ran.append(n)
            else:
                log(f"clustering: run {n} did not finish (train {codes[n]}, eval {eval_exit}); it runs again later")
    used = time.monotonic() - t0
    if ran:
        progress["sessions"].append(_session_record(ctx, used, runs=ran))
        write_json(parts / "progress.json", progress)
    return used

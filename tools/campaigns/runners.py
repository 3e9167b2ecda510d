"""The campaign runners: each continues one campaign for the seconds it is given, through `swarmctl
train`, `eval` and `sample` run as a user would, and leaves what to keep in the job's work folder
(``parts/NAME``: the new progress.json, the runs' small files, the logs), which the job packs into OUT.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmctl import files
from swarmctl.config import TrainConfig, from_dict
from swarmctl.errors import SwarmctlError
from swarmctl.files import atomic_write, atomic_write_text, holding
from swarmctl.rundir import CHECKPOINTS, LAST, RunDir
from swarmctl.training.checkpoint import load_checkpoint
from swarmctl.training.modes import StepMode
from tools.campaigns import parts
from tools.campaigns.files import copy_file, remove_file
from tools.campaigns.plan import (
    GROUP_RESERVE,
    IMAGE_RESERVE,
    MOG_EPOCHS,
    MOG_MIN_EPOCHS,
    MOG_PARTS,
    MOG_RESERVE,
    MOG_STEPS,
    PROGRESS,
    card_bytes,
    group_seconds,
    image_target,
    minimum,
    mog_target,
    read_progress,
    step_of,
    table_plan,
    table_runs,
)
from tools.campaigns.processes import Deadline, finish, log, start, summary, warn
from tools.campaigns.shipping import export_weights

SAMPLES = "samples.png"  # an image campaign's samples, beside its run's files
WEIGHTS = "weights.pt"  # a finished clustering run's weights (no optimizer state)


def eval_file(split: str) -> str:
    """The file `swarmctl eval` writes beside a checkpoint for ``split``."""
    return f"eval-{split}.json"


def write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; empty when it is missing or not one (a command killed before it wrote)."""
    try:
        data = files.read_json(path, "a command's record")
    except SwarmctlError:
        return {}
    return data if isinstance(data, dict) else {}


def pack(folder: Path, archive: Path) -> bool:
    """``folder`` as ``archive`` (tar.gz, one top folder), written atomically; nothing when empty."""
    if not (folder.is_dir() and any(folder.iterdir())):
        return False

    def write(fh: io.BufferedIOBase) -> None:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:
            tar.add(folder, arcname=folder.name)

    atomic_write(archive, write)
    return True


def export_run(run_dir: Path, dest: Path, weights_name: str | None = None) -> None:
    """Copy a run's small files to ``dest``; with ``weights_name`` also its best weights (no optimizer)."""
    run = RunDir(run_dir)
    with holding(dest):  # dest holds a run's files: this process writes them
        for path in (run.config, run.metrics, run.curves, *sorted(run.path.glob(eval_file("*")))):
            if path.is_file():
                copy_file(path, dest / path.name)
    if weights_name and run.best.is_file():
        export_weights(run.best, dest / weights_name)


class Context:
    """What every runner needs: the campaigns folder, the work and output folders, the step modes."""

    def __init__(self, root: Path, work: Path, out: Path, smoke: bool, flags: dict[str, list[str]],
                 data_dir: str, clustering_data: Path, wait_for_data: Callable[[], bool], card: str,
                 part_limit: int) -> None:
        self.root, self.work, self.out, self.smoke, self.flags = root, work, out, smoke, flags
        self.data_dir, self.clustering_data, self.wait_for_data = data_dir, clustering_data, wait_for_data
        self.card, self.part_limit = card, part_limit

    def parts(self, name: str) -> Path:
        path = self.work / "parts" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _session_record(ctx: Context, seconds: float, **facts) -> dict:
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "card": ctx.card,
            "wall_seconds": round(seconds, 1), **facts}


def _image_train_args(ctx: Context, name: str, committed: RunDir, run: RunDir, common: list[str],
                      minutes: float) -> tuple[list[str], int]:
    """The `swarmctl train` arguments that continue image campaign ``name`` from its committed last.pt (the
    run folder rebuilt from the committed files), or start it; and the epoch it starts from."""
    if committed.last.is_file():  # the run folder is rebuilt from the committed files
        ckpt = load_checkpoint(committed.last)
        with holding(run.path):
            write_json(run.config, ckpt.config)
            for src in (*committed.checkpoints(), committed.metrics):
                if src.is_file():
                    copy_file(src, run.path / src.name)
        done, epoch = ckpt.state.net_seconds / 60, ckpt.state.epoch
        args = ["train", "swarm-image", "--resume", name, *common, "--minutes", f"{done + minutes:.2f}"]
        if ctx.smoke:
            args += ["--max-epochs", str(epoch + 1)]
    else:
        epoch = 0
        size = ["--hidden", "8", "--iters", "2", "--max-epochs", "2"] if ctx.smoke else \
            ["--hidden", "256", "--iters", "10", "--layers", "1", "--max-epochs", "100000"]
        args = ["train", "swarm-image", "--dataset", name, "--data-dir", ctx.data_dir, *size, "--name", name, *common,
                "--minutes", f"{minutes:.2f}", *ctx.flags.get("image", [])]
    return args, epoch


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
    args, epoch = _image_train_args(ctx, name, RunDir(camp), RunDir(run_dir), common, minutes)
    facts = {"train_exit": finish(start(args, parts / "train.txt"), deadline.left() - reserve + 20)}
    facts["eval_exit"] = finish(start(["eval", name, *common], parts / "eval.txt"), deadline.left() - 15)
    if deadline.left() > 30:
        facts["sample_exit"] = finish(start(["sample", "--run", name, "--dataset", name, *common, "--out",
                                             str(run_dir / SAMPLES)], parts / "sample.txt"), deadline.left() - 10)
    export_run(run_dir, parts)
    if (run_dir / SAMPLES).is_file():
        copy_file(run_dir / SAMPLES, parts / SAMPLES)
    for pt in CHECKPOINTS:  # beside the archive: each is one returned file (13 MB)
        if (run_dir / pt).is_file():
            copy_file(run_dir / pt, ctx.out / f"{name}-{pt}")
    s = summary(run_dir)
    res = read_json(run_dir / eval_file("test"))
    bits = res.get("bits_per_dim")
    if bits is not None and bits < progress.get("best_bits_per_dim", float("inf")):
        progress["best_bits_per_dim"] = bits
    progress.update({"epochs": s["epochs"], "net_minutes": round(s["net_seconds"] / 60, 2),
                     "target_bits_per_dim": image_target(name)})
    used = time.monotonic() - t0
    progress["sessions"].append(_session_record(ctx, used, epochs=[epoch, s["epochs"]], test_bits_per_dim=bits,
                                                median_epoch_s=s.get("median_epoch_s"), **facts))
    write_json(parts / PROGRESS, progress)
    return used


MOG_DECAY_EPOCH = 70  # the paper's MoG schedule: lr x 0.1 after epoch 70 of 100
SMOKE_MOG_CODE = "8-2-1"  # a --smoke job's MoG model (it never continues a carried run of another size)
MOG_RETURNED = "mog-last.pt"  # the MoG run's last.pt as a job returns it: MOG_RETURNED.partK, its manifest in mog.tgz


@dataclass(frozen=True)
class MogRun:
    """The MoG run the campaign carries across jobs, rebuilt in the job's runs folder from the committed
    parts: its name, the epochs it has done and its net training seconds."""

    name: str
    epoch: int
    net_seconds: float
    step: str  # the step mode it trains in (a resumed run keeps its own)
    code: str = ""  # its model's paper code (768-20-1; a smoke job's 8-2-1)


def restore_mog(root: Path, runs: Path) -> MogRun | None:
    """Join campaigns/mog/last.pt from its committed parts (each checked against their manifest) into a run
    folder under ``runs``, with the config.json and metrics.jsonl it continues; None when none is committed."""
    manifest = parts.manifest_path(root / "mog", LAST)
    if not manifest.is_file():
        return None
    data = parts.joined_bytes(manifest)
    joined = runs / f".{MOG_RETURNED}"
    runs.mkdir(parents=True, exist_ok=True)
    with holding(runs):
        atomic_write(joined, lambda fh: fh.write(data))
    ckpt = load_checkpoint(joined)
    run = RunDir(runs / ckpt.config["run"]["name"])
    run.path.mkdir(parents=True, exist_ok=True)
    with holding(run.path):
        write_json(run.config, ckpt.config)
        copy_file(joined, run.last)
        committed = RunDir(root / "mog" / "runs" / run.path.name).metrics
        if committed.is_file():
            copy_file(committed, run.metrics)
    remove_file(joined)
    step = StepMode.of(from_dict(TrainConfig, ckpt.config.get("train", {}))).name  # an older run's switches too
    return MogRun(run.path.name, ckpt.state.epoch, ckpt.state.net_seconds, step, ckpt.config["run"]["code"])


def return_mog_checkpoint(last: Path, work: Path, out: Path, keep: Path, part_limit: int) -> int:
    """``last`` (the MoG run's last.pt) returned in :data:`MOG_PARTS` parts in ``out``, its manifest in
    ``keep`` (packed into mog.tgz); the number of parts, 0 when a part would exceed ``part_limit`` bytes."""
    size = last.stat().st_size
    limit = max(math.ceil(size / MOG_PARTS), 1)
    if limit > part_limit:
        warn(f"mog: last.pt ({size:,} bytes) does not fit in {MOG_PARTS} parts of {part_limit:,} bytes; not returned")
        return 0
    folder = work / "mog-split"
    folder.mkdir(parents=True, exist_ok=True)
    with holding(folder):
        copy_file(last, folder / MOG_RETURNED)
        manifest = parts.split(folder / MOG_RETURNED, folder, limit)
        for file, _, _ in manifest.parts:  # each part one returned file, the manifest last (in the archive)
            copy_file(folder / file, out / file)
    keep.mkdir(parents=True, exist_ok=True)
    with holding(keep):
        copy_file(parts.manifest_path(folder, MOG_RETURNED), parts.manifest_path(keep, MOG_RETURNED))
    return len(manifest.parts)


def _next_mog_run(root: Path, progress: dict, runs: Path) -> str:
    """A new MoG run's name: swarm-mog-K, K one past every run the campaign has recorded and every run in the
    job's ``runs`` folder (the carried run, rebuilt there, even where a smoke job leaves it alone)."""
    known = [progress.get("run") or "", *(s.get("run") or "" for s in progress["sessions"])]
    for folder in (root / "mog" / "runs", runs):
        known += [p.name for p in folder.iterdir()] if folder.is_dir() else []
    numbers = [int(n.rsplit("-", 1)[1]) for n in known if n.startswith("swarm-mog-") and n.rsplit("-", 1)[1].isdigit()]
    return f"swarm-mog-{max(numbers, default=0) + 1}"


def run_mog(ctx: Context, budget: float, left: float, timing: dict) -> float:
    """Continue the MoG run of the paper's schedule (100 epochs of 500 steps, lr x 0.1 after 70) from its
    committed last.pt for as many epochs as ``budget`` allows, or start one (the schedule done, or none
    yet); score its last.pt on the fixed test tasks and return it in parts. ``timing``: the job's step
    timings, for the step and start-up (warm-up, capture, compilation) of the mode it trains in (a
    continued run keeps its own)."""
    t0 = time.monotonic()
    runs = ctx.work / "runs"
    resumed = restore_mog(ctx.root, runs)
    if resumed is not None and ctx.smoke and resumed.code != SMOKE_MOG_CODE:
        log(f"mog: a --smoke job leaves the carried run {resumed.name} ({resumed.code}) alone; a smoke run starts")
        resumed = None
    if resumed is not None and resumed.epoch >= MOG_EPOCHS:
        log(f"mog: {resumed.name} finished the schedule ({resumed.epoch} epochs); a new run starts")
        resumed = None
    mode = resumed.step if resumed else (ctx.flags.get("mog") or ["--step", "eager"])[-1]
    measured = step_of(timing, "mog", mode)
    steps, val = (3, 2) if ctx.smoke else (MOG_STEPS, 100)
    reserve = 60.0 if ctx.smoke else MOG_RESERVE  # start-up, the 10,000 test tasks (smoke: generating 20), copies
    step_s, start_s = measured.step_seconds, measured.start_seconds
    per_epoch = (steps + val * 0.5) * step_s * 1.1  # a validation batch: forward only
    fit = lambda seconds: int((seconds - reserve - start_s) / per_epoch)  # noqa: E731
    if not ctx.smoke and fit(budget) < MOG_MIN_EPOCHS:  # the share already leaves the later campaigns theirs
        log(f"mog: {budget:.0f} s hold fewer than {MOG_MIN_EPOCHS} epochs at {step_s * 1e3:.1f} ms/step ({mode}); "
            "skipped")
        return 0.0
    keep, progress = ctx.parts("mog"), read_progress(ctx.root, "mog")
    done = resumed.epoch if resumed else 0
    epochs = 2 if ctx.smoke else min(MOG_EPOCHS - done, fit(budget))
    wall = min(left, reserve + start_s + epochs * per_epoch * 1.15)
    deadline = Deadline(wall)
    minutes = 5.0 if ctx.smoke else max(deadline.left() - reserve, 6) / 60  # smoke: the epochs bound it
    common = ["--runs-dir", str(runs), "--max-epochs", str(done + epochs)]
    if resumed is not None:
        name = resumed.name
        args = ["train", "swarm-mog", "--resume", name, *common, "--minutes",
                f"{resumed.net_seconds / 60 + minutes:.2f}"]
    else:
        name = _next_mog_run(ctx.root, progress, runs)
        size = ["--hidden", "8", "--iters", "2", "--steps-per-epoch", "3", "--val-batches", "2"] if ctx.smoke else \
            ["--hidden", "768", "--iters", "20", "--layers", "1"]  # smoke: SMOKE_MOG_CODE
        args = ["train", "swarm-mog", *size, *common, "--lr-decay-epoch", str(MOG_DECAY_EPOCH), "--minutes",
                f"{minutes:.2f}", "--name", name, *ctx.flags.get("mog", [])]
    facts = {"train_exit": finish(start(args, keep / "train.txt"), deadline.left() - reserve + 20)}
    test = []
    if ctx.smoke:
        facts["gen_exit"] = finish(start(["gen-data", "--kind", "mog4", "--tasks", "20", "--out",
                                          str(ctx.work / "mog-test.h5"), "--force"], keep / "gen.txt"), 60)
        test = ["--data", str(ctx.work / "mog-test.h5")]
    run = RunDir(runs / name)
    res, returned = {}, 0
    if run.last.is_file():  # the checkpoint the next job continues is the one scored
        facts["eval_exit"] = finish(start(["eval", str(run.last), "--runs-dir", str(runs), *test, "--force"],
                                          keep / "eval.txt"), deadline.left() - 5)
        res = read_json(run.path / eval_file("test")) if facts["eval_exit"] == 0 else {}
        returned = return_mog_checkpoint(run.last, ctx.work, ctx.out, keep, ctx.part_limit)
    export_run(run.path, keep / "runs" / name)
    ll = res.get("log_likelihood")
    if ll is not None and ll > progress.get("best_log_likelihood", -float("inf")):
        progress["best_log_likelihood"] = ll
    s = summary(run.path)
    if returned:  # the run the next job continues
        progress.update(run=name, epoch=s["epochs"], net_minutes=round(s["net_seconds"] / 60, 2))
    progress["target_log_likelihood"] = mog_target()
    used = time.monotonic() - t0
    progress["sessions"].append(_session_record(ctx, used, run=name, epochs=[done, s["epochs"]],
                                                planned_epochs=done + epochs, steps_per_epoch=steps,
                                                test_log_likelihood=ll,
                                                oracle_log_likelihood=res.get("oracle_log_likelihood"),
                                                ms_per_step=round(step_s * 1e3, 2), parts=returned, **facts))
    write_json(keep / PROGRESS, progress)
    return used


def run_clustering(ctx: Context, budget: float, left: float) -> float:
    """The next groups of the table's runs that fit ``budget`` (at least one group when ``left`` holds it)."""
    t0 = time.monotonic()
    progress = read_progress(ctx.root, "clustering")
    progress.setdefault("runs", {})
    per_run = progress.setdefault("minutes_per_run", 4.0)
    side = progress.setdefault("side_by_side", 3)
    side = min(side, 2) if ctx.smoke else table_plan(progress, left, card_bytes(ctx.card)).side  # what fits
    todo = [r for r in table_runs(ctx.smoke) if r["name"] not in progress["runs"]]
    reserve = GROUP_RESERVE
    group_s = group_seconds(per_run, ctx.smoke)
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
            warn("clustering: the seed-0 data could not be generated")
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
            res = read_json(runs / n / eval_file("val"))
            if codes[n] == 0 and eval_exit == 0 and "loss" in res:  # only finished runs are kept
                export_run(runs / n, parts / "runs" / n, weights_name=WEIGHTS if r["model"] == "swarm" else None)
                s = summary(runs / n)
                progress["runs"][n] = {"model": r["model"], "code": r["code"], "seed": r["seed"],
                                       "eval_loss": res["loss"], "epochs": s["epochs"],
                                       "net_minutes": round(s["net_seconds"] / 60, 2),
                                       "median_epoch_s": s.get("median_epoch_s")}
                ran.append(n)
            else:
                log(f"clustering: run {n} did not finish (train {codes[n]}, eval {eval_exit}); it runs again later")
    used = time.monotonic() - t0
    if ran:
        progress["sessions"].append(_session_record(ctx, used, runs=ran))
        write_json(parts / PROGRESS, progress)
    return used

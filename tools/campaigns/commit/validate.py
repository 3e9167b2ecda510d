"""The commit's second step: every unpacked campaign checked in full against the committed one. Its
progress.json continues the committed record and agrees with the evaluations beside it; every checkpoint
loads, is of the campaign's task and of the run its config.json describes; what would replace a shipped
model becomes a :class:`Candidate` for the re-evaluation."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from swarmctl import create_model
from swarmctl.config import ModelConfig, from_dict
from swarmctl.errors import SwarmctlError
from swarmctl.files import holding
from swarmctl.models import get_spec, paper_code
from swarmctl.rundir import BEST, CHECKPOINTS, CONFIG, CURVES, LAST, METRICS, RunDir
from swarmctl.runs import read_run_config, same_run
from swarmctl.training.checkpoint import Checkpoint, load_checkpoint
from tools.campaigns import parts
from tools.campaigns.commit.unpack import (
    Refused,
    _check_committed_file,
    _integer,
    _json_lines,
    _number,
    _one_line,
    _same,
    _show,
    _text,
    _untrusted,
    parse_json,
)
from tools.campaigns.files import copy_file, remove_file
from tools.campaigns.plan import MOG_EPOCHS, PROGRESS
from tools.campaigns.runners import MOG_RETURNED, SAMPLES, WEIGHTS, eval_file

IMAGE_FILES = (CONFIG, METRICS, eval_file("test"), CURVES, SAMPLES)
RUN_FILES = {"clustering": (CONFIG, METRICS, eval_file("val"), CURVES, WEIGHTS),
             "mog": (CONFIG, METRICS, eval_file("test"), CURVES)}
PNG = b"\x89PNG\r\n\x1a\n"


def _check_destination(dest: Path, top: Path) -> None:
    """Every folder from ``top`` down to ``dest`` is a real folder (not a link) or missing, and ``dest`` is
    a regular file or missing."""
    for folder in [*reversed(dest.relative_to(top).parents[:-1])]:
        path = top / folder
        if os.path.lexists(path) and not stat.S_ISDIR(os.lstat(path).st_mode):
            raise Refused(f"{path} is a symbolic link or file, not a folder; the commit writes only into "
                          "real folders")
    if os.path.lexists(dest) and not stat.S_ISREG(os.lstat(dest).st_mode):
        raise Refused(f"{dest} is a symbolic link or special file; the commit never writes through one")


# ---- campaigns -------------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """A returned checkpoint that may replace a shipped model."""

    campaign: str
    label: str  # in messages, e.g. "mnist-best.pt"
    weights: Path  # the staged checkpoint
    ckpt: Checkpoint
    config: dict[str, Any]
    scored: dict[str, Any]  # its returned evaluation (checked)
    metric: str  # the record's number: bits_per_dim or loss (lower is better)
    source: dict[str, Any]  # for the record: where it came from


@dataclass
class Campaign:
    """What one campaign's archive brings, checked: files by their path in campaigns/NAME (None: remove)."""

    name: str
    files: dict[str, Path | None] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def committed_progress(root: Path, name: str) -> dict[str, Any]:
    path = root / name / PROGRESS
    if not os.path.lexists(path):
        return {"campaign": name, "sessions": []}
    _check_committed_file(path)
    try:
        progress = json.loads(path.read_bytes())
        if not isinstance(progress, dict) or not isinstance(progress.get("sessions", []), list):
            raise ValueError("not a progress record")
    except ValueError as exc:
        raise Refused(f"{path} is damaged ({_one_line(exc)[:80]}); restore it (git checkout {path}) first") from None
    return progress


POSITIVE = ("best_bits_per_dim", "start_bits_per_dim", "target_bits_per_dim", "minutes_per_run")
FINITE = ("best_log_likelihood", "start_log_likelihood", "target_log_likelihood")


def check_progress(name: str, new: Any, old: dict[str, Any]) -> list[dict[str, Any]]:
    """The returned progress.json of campaign ``name``: the numbers campaign.py reads, in range; its
    sessions begin with the committed ones. Returns the sessions it adds."""
    what = f"{name}/progress.json"
    if not isinstance(new, dict):
        raise Refused(f"{what} is not a JSON object")
    if new.get("campaign") != name:
        raise Refused(f"{what} is the progress of campaign {_show(new.get('campaign'))}, not {name!r}")
    sessions = new.get("sessions")
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise Refused(f"{what}: sessions is {_show(sessions)}, not a list of records")
    for key in POSITIVE:
        if key in new:
            _number(new[key], f"{what}: {key}", positive=True)
    for key in FINITE:
        if key in new:
            _number(new[key], f"{what}: {key}")
    if "net_minutes" in new:
        _number(new["net_minutes"], f"{what}: net_minutes", low=0)
    if "epochs" in new:
        _integer(new["epochs"], f"{what}: epochs")
    if "side_by_side" in new:
        _integer(new["side_by_side"], f"{what}: side_by_side", low=1)
    before = old.get("sessions", [])
    if sessions[: len(before)] != before:
        raise Refused(f"{what} does not continue campaigns/{name}/progress.json (its first {len(before)} sessions "
                      "differ): the session started from other campaigns than the committed ones")
    for record in sessions[len(before):]:
        for key in ("date", "card"):
            if key in record:
                _text(record[key], f"{what}: a session's {key}")
    return sessions[len(before):]


def _run_config(folder: Path, what: str) -> dict[str, Any]:
    """folder/config.json: strict JSON and a valid swarmctl run config."""
    config = parse_json(RunDir(folder).config.read_bytes(), what)
    with _untrusted(what, RunDir(folder).config):
        read_run_config(folder)
    run = config.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("name"), str) or not isinstance(run.get("code"), str):
        raise Refused(f"{what} has no run name and code")
    model_cfg = from_dict(ModelConfig, config["model"])
    if run["code"] != paper_code(model_cfg):
        raise Refused(f"{what} names code {_show(run['code'])} for a {paper_code(model_cfg)} model")
    return config


def _build(config: dict[str, Any]) -> torch.nn.Module:
    return create_model(from_dict(ModelConfig, config["model"]))


def check_checkpoint(path: Path, label: str, config: dict[str, Any], task: str) -> Checkpoint:
    """A returned checkpoint: valid for load_checkpoint, of ``task``, of the run ``config`` describes, its
    weights loaded with strict=True into the model ``config`` builds."""
    try:
        ckpt = load_checkpoint(path)
    except SwarmctlError as exc:
        raise Refused(f"{label}: {_one_line(exc).replace(str(path), 'the file')}") from None
    if ckpt.task != task:
        raise Refused(f"{label} is a checkpoint of task {ckpt.task!r}, not {task!r}")
    if not same_run(ckpt.config, config):
        raise Refused(f"{label} is not of the run its config.json describes ({ckpt.config['model'].get('name')} "
                      f"{ckpt.config.get('run', {}).get('code')} against {config['model']['name']} "
                      f"{config['run']['code']}, or other data or options)")
    with _untrusted(f"{label} in the model its config.json builds"):
        _build(config).load_state_dict(ckpt.model, strict=True)
    return ckpt


def _check_adam(ckpt: Checkpoint, config: dict[str, Any], label: str) -> None:
    """last.pt's optimizer state loads into Adam over the model's parameters, each moment of its shape."""
    if ckpt.optimizer is None:
        raise Refused(f"{label} holds no optimizer state; the next session cannot resume from it")
    with _untrusted(f"{label}'s optimizer state"):
        model = _build(config)
        opt = torch.optim.Adam(model.parameters(), lr=ckpt.state.lr)
        opt.load_state_dict(ckpt.optimizer)
        for p in model.parameters():
            for key, value in opt.state.get(p, {}).items():
                moment = key in ("exp_avg", "exp_avg_sq")
                if moment and (value.shape != p.shape or not bool(torch.isfinite(value).all())):
                    raise Refused(f"{label}'s optimizer state does not fit the model (moment {key})")


def check_eval(path: Path, label: str, config: dict[str, Any], split: str, keys: tuple[str, ...],
               ckpt: Checkpoint | None = None, low: float | None = 0) -> dict[str, Any]:
    """A returned evaluation: of this model, on ``split``, its ``keys`` finite (>= ``low``), of ``ckpt``'s
    best epoch."""
    res = parse_json(path.read_bytes(), label)
    if not isinstance(res, dict):
        raise Refused(f"{label} is not a JSON object")
    if res.get("split") != split:
        raise Refused(f"{label} scores split {_show(res.get('split'))}, not {split!r}")
    for key in keys:
        _number(res.get(key), f"{label}: {key}", low=low)
    if "model" in res and (res.get("model"), res.get("code")) != (config["model"]["name"], config["run"]["code"]):
        raise Refused(f"{label} scores {_show(res.get('model'))} {_show(res.get('code'))}, not the run's model")
    _integer(res.get("tasks"), f"{label}: tasks", low=1)
    if ckpt is not None:
        if _integer(res.get("epoch"), f"{label}: epoch") != ckpt.state.best_epoch:
            raise Refused(f"{label} scores epoch {res['epoch']}, not the checkpoint's best epoch "
                          f"{ckpt.state.best_epoch}")
    return res


def _check_metrics(path: Path, label: str) -> None:
    for number, record in _json_lines(path):
        if not isinstance(record, dict) or not isinstance(record.get("epoch"), int) or isinstance(record["epoch"],
                                                                                                   bool):
            raise Refused(f"{label} line {number} is not a metrics record")


def _check_png(path: Path, label: str) -> None:
    with open(path, "rb") as fh:
        if fh.read(len(PNG)) != PNG:
            raise Refused(f"{label} is not a PNG image")


def _check_extras(folder: Path, prefix: str, names: tuple[str, ...]) -> None:
    for file in names:
        path = folder / file
        if file.endswith(".png") and path.is_file():
            _check_png(path, f"{prefix}/{file}")
        elif file == METRICS and path.is_file():
            _check_metrics(path, f"{prefix}/{file}")


def _expect_best(what: str, progress: dict[str, Any], key: str, old: Any, new: Any, better: Callable) -> None:
    """``progress[key]`` is the better of the committed best and this session's number."""
    values = [v for v in (old, new) if isinstance(v, int | float) and not isinstance(v, bool)]
    want = better(values) if values else None
    got = progress.get(key)
    if (want is None) != (got is None) or (want is not None and not _same(got, want)):
        raise Refused(f"{what}: {key} is {_show(got)}, but the committed best and this session's evaluation "
                      f"give {_show(want)}")


def _continues_committed(committed: Path, name: str, last: Checkpoint, config: dict[str, Any]) -> None:
    """The returned last.pt continues the committed one (when there is one): the same run, not behind it."""
    if not os.path.lexists(committed):
        return
    _check_committed_file(committed)
    try:
        before = load_checkpoint(committed)
    except SwarmctlError as exc:
        raise Refused(f"{committed} is damaged ({_one_line(exc)[:100]}); restore it first") from None
    if not same_run(before.config, config):
        raise Refused(f"{name}-last.pt is not the run {committed} holds; the session did not continue it")
    if last.state.epoch < before.state.epoch:
        raise Refused(f"{name}-last.pt is at epoch {last.state.epoch}, behind the committed {before.state.epoch}")


def check_image(name: str, folder: Path, pts: dict[str, Path], root: Path, progress: dict[str, Any],
                added: list[dict[str, Any]], old: dict[str, Any], base: dict[str, Any]) -> Campaign:
    """An image campaign: its checkpoints with config.json, evaluation, metrics and pictures."""
    out = Campaign(name)
    bits = added[-1].get("test_bits_per_dim") if added else None
    if not pts:  # training failed: no evaluation either
        if bits is not None:
            raise Refused(f"{name}/progress.json records test_bits_per_dim {_show(bits)}, but no checkpoint came back")
        _expect_best(f"{name}/progress.json", progress, "best_bits_per_dim", old.get("best_bits_per_dim"), None, min)
        if any((folder / f).exists() for f in IMAGE_FILES):
            out.notes.append(f"{name}: no checkpoints came back; only its progress is committed")
        return out
    missing = [p for p in CHECKPOINTS if p not in pts]
    if missing:
        raise Refused(f"{name}-{missing[0]} did not come back with {name}-{[p for p in pts][0]}; both or neither")
    if not RunDir(folder).config.is_file():
        raise Refused(f"{name}.tgz has no config.json for {name}-last.pt and {name}-best.pt")
    config = _run_config(folder, f"{name}/{CONFIG}")
    model_cfg = from_dict(ModelConfig, config["model"])
    if get_spec(model_cfg.name).task != "image" or model_cfg.dataset != name:
        raise Refused(f"{name}/config.json is a {model_cfg.name} run on {model_cfg.dataset}, not an image model "
                      f"of {name}")
    last = check_checkpoint(pts[LAST], f"{name}-last.pt", config, "image")
    best = check_checkpoint(pts[BEST], f"{name}-best.pt", config, "image")
    _check_adam(last, config, f"{name}-last.pt")
    _continues_committed(RunDir(root / name).last, name, last, config)
    _check_extras(folder, name, IMAGE_FILES)
    scored = None
    if (folder / eval_file("test")).is_file():
        scored = check_eval(folder / eval_file("test"), f"{name}/eval-test.json", config, "test",
                            ("loss", "bits_per_dim"), best)
        if not math.isclose(scored["bits_per_dim"], scored["loss"] / math.log(2), rel_tol=1e-6):
            raise Refused(f"{name}/eval-test.json: bits_per_dim {scored['bits_per_dim']} is not its loss "
                          f"{scored['loss']} in bits")
    if bits is not None:
        _number(bits, f"{name}/progress.json: test_bits_per_dim", positive=True)
        if scored is None or not _same(bits, scored["bits_per_dim"]):
            raise Refused(f"{name}/progress.json: test_bits_per_dim {bits} is not what eval-test.json holds")
    _expect_best(f"{name}/progress.json", progress, "best_bits_per_dim", old.get("best_bits_per_dim"), bits, min)
    out.files.update({CONFIG: RunDir(folder).config, LAST: pts[LAST], BEST: pts[BEST]})
    for file in IMAGE_FILES[1:]:  # one that did not come back described the old checkpoint
        out.files[file] = folder / file if (folder / file).is_file() else None
    if scored is not None:
        out.candidates.append(Candidate(name, f"{name}-best.pt", pts[BEST], best, config, scored, "bits_per_dim",
                                        {**base, "net_minutes": progress.get("net_minutes"),
                                         "epochs": progress.get("epochs")}))
    return out


def _returned_runs(folder: Path, name: str) -> list[str]:
    runs = folder / "runs"
    if not runs.is_dir():
        return []
    found = []
    for path in sorted(runs.iterdir()):
        if not path.is_dir():
            raise Refused(f"{name}.tgz: runs/{path.name} is a file, not a run folder")
        found.append(path.name)
    return found


def _new_run_folder(root: Path, name: str, run: str) -> None:
    if os.path.lexists(root / name / "runs" / run):
        raise Refused(f"{name}.tgz brings run {run!r}, which campaigns/{name}/runs/ already holds; the session "
                      "would replace a committed run")


def _run_records(progress: dict[str, Any], what: str) -> dict[str, Any]:
    """The clustering progress's ``runs``: each a record of its model, code, seed and numbers in range."""
    runs = progress.get("runs", {})
    if not isinstance(runs, dict):
        raise Refused(f"{what}: runs is {_show(runs)}, not an object")
    for run, entry in runs.items():
        where = f"{what}: run {run[:60]!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str) \
                or not isinstance(entry.get("code"), str):
            raise Refused(f"{where} is not a run record (model, code, seed, eval_loss)")
        _integer(entry.get("seed"), f"{where} seed")
        _number(entry.get("eval_loss"), f"{where} eval_loss", low=0)
        for key in ("epochs",):
            if key in entry:
                _integer(entry[key], f"{where} {key}")
        for key in ("net_minutes", "median_epoch_s"):
            if entry.get(key) is not None:
                _number(entry[key], f"{where} {key}", low=0)
    return runs


def check_clustering(folder: Path, root: Path, progress: dict[str, Any], old: dict[str, Any],
                     base: dict[str, Any]) -> Campaign:
    """The clustering campaign: its finished runs, each recorded in progress.json with its evaluation."""
    out, what = Campaign("clustering"), "clustering/progress.json"
    runs = _run_records(progress, what)
    committed = old.get("runs", {}) if isinstance(old.get("runs"), dict) else {}
    for run, entry in committed.items():
        if runs.get(run) != entry:
            raise Refused(f"{what} drops or changes the committed run {run!r}")
    new_runs = sorted(set(runs) - set(committed))
    returned = _returned_runs(folder, "clustering")
    if returned != new_runs:
        raise Refused(f"{what} records new runs {new_runs} but clustering.tgz brings {returned}")
    for record in progress.get("sessions", [])[len(old.get("sessions", [])):]:
        if not set(record.get("runs", [])) <= set(new_runs):
            raise Refused(f"{what}: a session lists runs it did not bring back")
    for run in returned:
        _new_run_folder(root, "clustering", run)
        run_dir, prefix = folder / "runs" / run, f"clustering/runs/{run}"
        if not RunDir(run_dir).config.is_file() or not (run_dir / eval_file("val")).is_file():
            raise Refused(f"{prefix}: a finished run needs its config.json and eval-val.json")
        config = _run_config(run_dir, f"{prefix}/{CONFIG}")
        model_cfg, entry = from_dict(ModelConfig, config["model"]), runs[run]
        if config["run"]["name"] != run or get_spec(model_cfg.name).task != "clustering":
            raise Refused(f"{prefix}/config.json is run {_show(config['run']['name'])} of {model_cfg.name}, not a "
                          f"clustering run {run!r}")
        if entry["model"] != model_cfg.name or entry["seed"] != config["train"].get("seed"):
            raise Refused(f"{what}: run {run!r} is recorded as {entry['model']} seed {entry['seed']}, its config "
                          f"says {model_cfg.name} seed {config['train'].get('seed')}")
        weights = None
        if (run_dir / WEIGHTS).is_file():
            weights = check_checkpoint(run_dir / WEIGHTS, f"{prefix}/weights.pt", config, "clustering")
        scored = check_eval(run_dir / eval_file("val"), f"{prefix}/eval-val.json", config, "val", ("loss",), weights)
        for key in ("accuracy", "oracle_accuracy"):
            if key in scored:
                _number(scored[key], f"{prefix}/eval-val.json: {key}", low=0)
        if not _same(entry["eval_loss"], scored["loss"]):
            raise Refused(f"{what}: run {run!r} has eval_loss {entry['eval_loss']}, its eval-val.json "
                          f"{scored['loss']}")
        _check_extras(run_dir, prefix, RUN_FILES["clustering"])
        out.files.update({f"runs/{run}/{f}": run_dir / f for f in RUN_FILES["clustering"] if (run_dir / f).is_file()})
        if weights is not None:
            out.candidates.append(Candidate("clustering", f"clustering run {run}", run_dir / WEIGHTS, weights,
                                            config, scored, "loss",
                                            {**base, "net_minutes": entry.get("net_minutes"),
                                             "epochs": entry.get("epochs"), "run": run}))
    return out


def check_mog(folder: Path, root: Path, progress: dict[str, Any], added: list[dict[str, Any]],
              old: dict[str, Any], last_pt: Path | None) -> Campaign:
    """The MoG campaign: the runs this session's records name, with their evaluation; the run it carries
    across jobs (``run``) may come back again, and with it its last.pt (joined from its parts,
    ``last_pt``), which continues the committed one and is placed in parts again."""
    out, what = Campaign("mog"), "mog/progress.json"
    named = [r.get("run") for r in added if "run" in r]
    if not all(isinstance(n, str) for n in named):
        raise Refused(f"{what}: a session's run is not a run name")
    best = None
    for record in added:
        if record.get("test_log_likelihood") is not None:
            ll = _number(record["test_log_likelihood"], f"{what}: test_log_likelihood")
            best = ll if best is None else max(best, ll)
    configs = {}
    for run in _returned_runs(folder, "mog"):
        run_dir, prefix = folder / "runs" / run, f"mog/runs/{run}"
        if run not in named:
            raise Refused(f"mog.tgz brings run {run!r}, which no session of {what} names")
        if not RunDir(run_dir).config.is_file():
            out.notes.append(f"mog: run {run} came back without its config.json (training failed); not committed")
            continue
        if run != old.get("run"):  # the run the campaign carries is continued; any other is new
            _new_run_folder(root, "mog", run)
        config = configs[run] = _run_config(run_dir, f"{prefix}/{CONFIG}")
        if config["run"]["name"] != run or get_spec(config["model"]["name"]).task != "mog":
            raise Refused(f"{prefix}/config.json is not mog run {run!r}")
        if (run_dir / eval_file("test")).is_file():
            scored = check_eval(run_dir / eval_file("test"), f"{prefix}/eval-test.json", config, "test",
                                ("log_likelihood",), low=None)
            said = next((r.get("test_log_likelihood") for r in reversed(added) if r.get("run") == run), None)
            if said is None or not _same(said, scored["log_likelihood"]):
                raise Refused(f"{what}: run {run!r} has test_log_likelihood {_show(said)}, its eval-test.json "
                              f"{scored['log_likelihood']}")
        _check_extras(run_dir, prefix, RUN_FILES["mog"])
        out.files.update({f"runs/{run}/{f}": run_dir / f if (run_dir / f).is_file() else None
                          for f in RUN_FILES["mog"]})
    _expect_best(what, progress, "best_log_likelihood", old.get("best_log_likelihood"), best, max)
    if last_pt is None:
        if (progress.get("run"), progress.get("epoch")) != (old.get("run"), old.get("epoch")):
            raise Refused(f"{what} moves the carried run to {_show(progress.get('run'))} epoch "
                          f"{_show(progress.get('epoch'))}, but no {MOG_RETURNED} came back")
        return out
    run = progress.get("run")
    if not isinstance(run, str) or run not in configs:
        raise Refused(f"{MOG_RETURNED} came back, but {what} names no returned run with its config.json as the "
                      f"run it carries (run {_show(run)})")
    last = check_checkpoint(last_pt, MOG_RETURNED, configs[run], "mog")
    _check_adam(last, configs[run], MOG_RETURNED)
    if _integer(progress.get("epoch"), f"{what}: epoch") != last.state.epoch:
        raise Refused(f"{what}: epoch is {progress['epoch']}, {MOG_RETURNED} is at epoch {last.state.epoch}")
    scored = folder / "runs" / run / eval_file("test")
    if scored.is_file() and parse_json(scored.read_bytes(), "eval").get("epoch") != last.state.epoch - 1:
        raise Refused(f"mog/runs/{run}/eval-test.json does not score {MOG_RETURNED} (epoch {last.state.epoch - 1})")
    _continues_committed_mog(root, last, configs[run], last_pt.parent)
    split_to = last_pt.parent / "mog-parts"
    split_to.mkdir()
    joined = split_to / LAST
    with holding(split_to):
        copy_file(last_pt, joined)
        # campaigns/mog/ holds it in the parts it came back in (each within the job's limit on a returned file)
        returned = parts.read_manifest(parts.manifest_path(folder, MOG_RETURNED))
        manifest = parts.split(joined, split_to, max(size for _, size, _ in returned.parts))
        remove_file(joined)
    out.files[parts.manifest_path(Path(), LAST).name] = parts.manifest_path(split_to, LAST)
    out.files.update({file: split_to / file for file, _, _ in manifest.parts})
    for stale in sorted((root / "mog").glob(f"{LAST}.part*")):  # a committed part the new file no longer has
        out.files.setdefault(stale.name, None)
    return out


def _continues_committed_mog(root: Path, last: Checkpoint, config: dict[str, Any], scratch: Path) -> None:
    """The returned last.pt continues the committed one (in parts in campaigns/mog/): the same run, not behind
    it; or a new run once the committed one finished the paper's schedule."""
    manifest = parts.manifest_path(root / "mog", LAST)
    if not os.path.lexists(manifest):
        return
    committed = scratch / f"committed-{LAST}"
    try:
        parts.join(manifest, committed)
        before = load_checkpoint(committed)
    except SwarmctlError as exc:
        raise Refused(f"{manifest.parent}/{LAST} (in parts) is damaged ({_one_line(exc)[:100]}); restore it first") \
            from None
    if not same_run(before.config, config):
        if before.state.epoch >= MOG_EPOCHS:
            return  # the committed run finished the schedule: a new one may start
        raise Refused(f"{MOG_RETURNED} is not the run campaigns/mog/{LAST} holds, which has not finished the "
                      f"schedule ({before.state.epoch} of {MOG_EPOCHS} epochs); the session did not continue it")
    if last.state.epoch < before.state.epoch:
        raise Refused(f"{MOG_RETURNED} is at epoch {last.state.epoch}, behind the committed {before.state.epoch}")


def check_campaign(name: str, unpacked: Path, pts: dict[str, Path], root: Path, base: dict[str, Any]) -> Campaign:
    """Campaign ``name``'s unpacked archive (and returned checkpoints), checked in full."""
    _check_destination(root / name / PROGRESS, root)  # before any work: campaigns/NAME is a real folder
    folder = unpacked / name
    path = folder / PROGRESS
    if not path.is_file():
        if pts:
            raise Refused(f"{name}.tgz has no progress.json, but {name}-*.pt came back")
        return Campaign(name, notes=[f"{name}: its archive holds no progress.json (the campaign recorded nothing); "
                                     "nothing of it is committed"])
    progress = parse_json(path.read_bytes(), f"{name}/progress.json")
    old = committed_progress(root, name)
    added = check_progress(name, progress, old)
    last = added[-1] if added else {}
    base = {**base, "trained_on": f"{base['trained_on']}, campaign {name} (campaigns/{name})",
            "session": last.get("date")}
    if name == "clustering":
        out = check_clustering(folder, root, progress, old, base)
    elif name == "mog":
        out = check_mog(folder, root, progress, added, old, pts.get(LAST))
    else:
        out = check_image(name, folder, pts, root, progress, added, old, base)
    out.files[PROGRESS] = path
    return out

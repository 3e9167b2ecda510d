"""Where the campaigns stand (`python -m tools.campaigns status`): for each campaign its number against the paper's
and the work done so far, and what the next job would do with a given wall: the order, the shares and the
step modes that :mod:`tools.campaigns.plan` computes for `python -m tools.campaigns run` (shown, not computed
again)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.errors import ResourceError
from swarmctl.runs.shipped import shipped_models
from tools.campaigns import plan as campaign
from tools.campaigns.cpu import COST, CPU, CpuRow, cpu_plan
from tools.campaigns.cpu import read_progress as read_cpu_progress
from tools.campaigns.plan import PACK_RESERVE, TIMING
from tools.campaigns.runners import read_json


@dataclass(frozen=True)
class CampaignStatus:
    """One campaign: its number and the paper's, the work so far, and its part in the next job."""

    name: str
    metric: str  # what the numbers are (lower or higher is better, as the paper reports them)
    ours: float | None
    paper: float | None
    sessions: int
    done: str  # the work so far, in the campaign's own unit (epochs, runs)
    gap: float | None  # relative distance to the paper (None: met, or waiting for another campaign)
    order: int | None  # its place in the next job (None: the next job does not run it)
    share_s: float | None  # seconds of the next job's wall it would get (the campaigns before it using theirs)
    flags: tuple[str, ...] | None  # the step mode it would train in (None: the trainer's default)


@dataclass(frozen=True)
class Status:
    campaigns: tuple[CampaignStatus, ...]
    wall: float
    files: int  # the files the next job may return
    timing_from: str | None  # where the step timings come from (None: no job measured them yet)
    rows: tuple[PaperRow, ...]  # every row of the paper's tables
    table: campaign.TablePlan  # the clustering table on one card: side by side, jobs of ``wall`` seconds
    card: str | None  # the card the plan counts on (the last committed job's)
    waiting: tuple[str, ...] = ()  # campaigns whose files do not fit beside the others' in the next job
    cpu: tuple[CpuRow, ...] = ()  # the clustering table on a CPU (tools.campaigns.cpu), row by row
    cpu_cost_from: str | None = None  # the machine and date of its measured cost (None: not measured)


TASK_OF = {"clustering": "clustering", "mog": "mog", **{name: "image" for name in campaign.IMAGES}}


def _best(progress: dict, fields: tuple[str, ...], best: Any) -> float | None:
    """The best (``max`` or ``min``) of a progress record's numbers in ``fields``: the campaign's own and the run
    it started from, as the paper rows show them (:func:`_best_known`)."""
    values = [progress[f] for f in fields if isinstance(progress.get(f), (int, float))]
    return best(values) if values else None


def _numbers(root: Path, name: str) -> tuple[str, float | None, float | None, str]:
    """(metric, ours, the paper's, the work so far) of campaign ``name``."""
    p = campaign.read_progress(root, name)
    if name == "clustering":
        runs = p.get("runs", {})
        losses = [r["eval_loss"] for r in runs.values() if isinstance(r, dict) and r.get("eval_loss")]
        ours = sum(losses) / len(losses) if losses else None
        return ("mean validation loss of the finished runs", ours, None,
                f"{len(runs)} of {len(campaign.table_runs())} runs")
    if name == "mog":
        ours = _best(p, ("best_log_likelihood", "start_log_likelihood"), max)
        done = f"run {p['run']} at epoch {p.get('epoch', 0)} of {campaign.MOG_EPOCHS}" if p.get("run") else \
            "no run carried across jobs yet"
        return "test log-likelihood per point", ours, campaign.mog_target(), done
    ours = _best(p, ("best_bits_per_dim", "start_bits_per_dim"), min)
    return ("test bits/dim", ours, campaign.image_target(name),
            f"{p.get('epochs', 0)} epochs, {p.get('net_minutes', 0)} net minutes")


def campaign_status(root: Path, wall: float, files: int, graphs_ok: bool = True) -> Status:
    """Every campaign's standing and its part in a next job of ``wall`` seconds that returns at most ``files``
    files (its GPU tests passing, with ``graphs_ok``), planned by the same functions the job uses."""
    if not root.is_dir():
        raise ResourceError(f"{root} is not a folder; pass the repository's campaigns folder with `campaigns`")
    order, waiting = campaign.within_files(campaign.plan(root), root, files)
    left = wall - PACK_RESERVE
    # the step modes as the job picks them (each task's share of the whole wall, phase 2), then each
    # campaign's share of what the ones before it leave when they use theirs (phase 3)
    timing = read_json(root / TIMING)
    flags = campaign.choose_flags(timing, graphs_ok, {TASK_OF[n]: campaign.share(order, i, left)
                                                      for i, (n, _) in enumerate(order)})
    shares = {}
    for i, (name, _) in enumerate(order):
        shares[name] = campaign.share(order, i, left)
        left -= shares[name]
    rows = []
    for name in campaign.NAMES:
        metric, ours, paper, done = _numbers(root, name)
        place = next((i for i, (n, _) in enumerate(order) if n == name), None)
        task_flags = flags.get(TASK_OF[name])
        rows.append(CampaignStatus(name, metric, ours, paper, len(campaign.read_progress(root, name)["sessions"]),
                                   done, dict(order).get(name), None if place is None else place + 1,
                                   shares.get(name), None if task_flags is None else tuple(task_flags)))
    card = last_card(root)
    table = campaign.table_plan(campaign.read_progress(root, "clustering"), wall, campaign.card_bytes(card))
    cost = read_json(root / CPU / COST)
    return Status(tuple(rows), wall, files, str(root / TIMING) if timing else None,
                  paper_rows(root, wall, timing, card=card),
                  table, card, tuple(waiting), cpu_plan(root),
                  f"{cost['machine']}, {cost['date']}" if cost.get("machine") and cost.get("date") else None)


# ---- the paper's tables, row by row --------------------------------------------------------------------------

@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's tables: its number, ours, the step speed measured for it and the GPU minutes
    still needed to reach the schedule."""

    table: str
    model: str
    code: str
    dataset: str | None
    paper: float  # as the paper reports it (bits/dim, log-likelihood, loss)
    ours: float | None
    campaign: str | None  # the campaign that chases it (None: none does)
    step_s: float | None  # seconds per step of the fastest mode measured for it (None: not measured)
    minutes_left: float | None  # GPU minutes still needed (None: not known; 0: reached)
    note: str


def last_card(root: Path) -> str | None:
    """The card of the last committed job (campaigns/sessions.jsonl), None before the first."""
    path = root / "sessions.jsonl"
    lines = path.read_text(errors="replace").split("\n") if path.is_file() else []
    for line in reversed([x for x in lines if x.strip()]):
        try:
            card = json.loads(line).get("card")
        except (ValueError, AttributeError):
            continue
        if isinstance(card, str):
            return card
    return None


def paper_rows(root: Path, wall: float, timing: dict | None = None, progress: dict | None = None,
               card: str | None = None) -> tuple[PaperRow, ...]:
    """Every row of the paper's tables (``studies/paper_results.json``) with our number, the fastest step
    measured for it (``timing``, else campaigns/timing.json) and the GPU minutes its campaign still needs:
    the clustering table's runs left in jobs of ``wall`` seconds (``minutes_per_run`` net minutes each, as many side
    by side as :func:`tools.campaigns.plan.table_plan` lets share the ``card``, by default the last job's); MoG, the
    rest of the paper's schedule of the run it carries (100 x 500 steps) at the measured step, until the
    paper's number is reached. ``progress``: campaigns' records newer than the committed ones (a job's)."""
    timing = read_json(root / TIMING) if timing is None else timing
    records = {name: (progress or {}).get(name) or campaign.read_progress(root, name) for name in campaign.NAMES}
    records[CPU] = read_cpu_progress(root)
    table = campaign.table_plan(records["clustering"], wall, campaign.card_bytes(card or last_card(root)))
    earlier = read_json(root / EARLIER).get("rows", [])
    return tuple(_best_known(_paper_row(row, records, timing, table), row, records, earlier)
                 for row in campaign.paper_results()["rows"])


EARLIER = "earlier.json"  # campaigns/earlier.json: numbers of benchmark runs for rows no campaign or model holds


def _best_known(r: PaperRow, row: dict, records: dict, earlier: list) -> PaperRow:
    """``r`` with the best number known for its row: the campaign's own, its progress record's start (a run
    from before the campaign), the shipped model's record, or campaigns/earlier.json; the note says which.
    The one place the README's numbers come from (tests/test_numbers.py holds them to it)."""
    key = (row["model"], row["code"], row.get("dataset"))
    found = [(r.ours, "this campaign")] if r.ours is not None else []
    p = records.get(r.campaign or "", {})
    for field in ("start_log_likelihood", "start_bits_per_dim"):
        if isinstance(p.get(field), (int, float)):
            found.append((p[field], p.get("start_note", "a run from before the campaign").split(";")[0]))
    for m in shipped_models():
        cfg = m.record.get("config", {}).get("model", {})
        if (m.record.get("model"), m.record.get("code"), cfg.get("dataset")) == key and m.record.get("default_for") \
                is None and isinstance(m.record.get("eval"), dict):
            value = m.record["eval"].get("loss" if row["task"] == "clustering" else "bits_per_dim")
            if isinstance(value, (int, float)):
                found.append((value, f"the shipped model {m.checkpoint.name} (one seed)"))
    found += [(e["value"], e["source"]) for e in earlier if (e.get("model"), e.get("code"), e.get("dataset")) == key]
    cpu_runs = [r for r in records.get(CPU, {}).get("runs", {}).values()
                if (r.get("model"), r.get("code"), None) == key and isinstance(r.get("eval_loss"), (int, float))]
    if cpu_runs:  # the CPU table's finished seeds: their mean, as README's CPU table states it
        found.append((sum(r["eval_loss"] for r in cpu_runs) / len(cpu_runs),
                      f"the CPU table ({len(cpu_runs)} of 3 seeds, 60 net min each on a CPU)"))
    if not found:
        return r
    higher = row["task"] == "mog"  # a log-likelihood; the other rows are losses or bits/dim
    value, source = max(found, key=lambda f: f[0] if higher else -f[0])
    return dataclasses.replace(r, ours=value, note=f"best known from {source}; {r.note}")


def _fastest_step(timing: dict, task: str) -> float | None:
    steps = campaign.step_seconds(timing, task)
    return min(steps.values()) if steps else None


def mog_minutes_left(progress: dict, step_s: float | None) -> float | None:
    """GPU minutes of the MoG schedule still to train: the epochs the carried run has left (all 100 without
    one) of 500 steps at ``step_s``; 0 once the paper's number is reached, None without a measured step."""
    ours = progress.get("best_log_likelihood")
    if ours is not None and ours >= campaign.mog_target():
        return 0.0
    if step_s is None:
        return None
    done = progress.get("epoch", 0) if progress.get("run") else 0
    return max(campaign.MOG_EPOCHS - done, 0) * campaign.MOG_STEPS * step_s / 60


def _paper_row(row: dict, records: dict, timing: dict, table: campaign.TablePlan) -> PaperRow:
    base = dict(table=row["table"], model=row["model"], code=row["code"], dataset=row.get("dataset"),
                paper=row["reported"])
    if row["task"] == "clustering":
        return PaperRow(**base, **_clustering_row(row, records["clustering"], timing, table))
    if row["task"] == "mog" and (row["model"], row["code"]) == ("swarm-mog", "768-20-1"):
        p = records["mog"]
        step = _fastest_step(timing, "mog")
        carried = f"{p['run']} at epoch {p.get('epoch', 0)}" if p.get("run") else "no run yet"
        return PaperRow(**base, ours=p.get("best_log_likelihood"), campaign="mog", step_s=step,
                        minutes_left=mog_minutes_left(p, step),
                        note=f"one run of {campaign.MOG_EPOCHS} x {campaign.MOG_STEPS} steps carried across jobs "
                             f"({carried})")
    if row.get("dataset") in campaign.IMAGES and (row["model"], row["code"]) == ("swarm-image", "256-10-1"):
        ours = records[row["dataset"]].get("best_bits_per_dim")
        reached = ours is not None and ours <= row["reported"]
        return PaperRow(**base, ours=ours, campaign=row["dataset"], step_s=_fastest_step(timing, "image"),
                        minutes_left=0.0 if reached else None,
                        note="the paper states its training time, not its epochs: the minutes left are not known")
    return PaperRow(**base, ours=None, campaign=None, step_s=None, minutes_left=None, note="no campaign")


def _clustering_row(row: dict, p: dict, timing: dict, table: campaign.TablePlan) -> dict:
    key = (row["model"], row["code"])
    done = [r for r in p.get("runs", {}).values() if (r.get("model"), r.get("code")) == key]
    left = sum(1 for r in campaign.table_runs() if (r["model"], r["code"]) == key) - len(done)
    losses = [r["eval_loss"] for r in done if r.get("eval_loss")]
    step = _fastest_step(timing, "clustering") if row["model"] == "swarm" else None  # timed: SWARM 192-10-1
    return dict(ours=sum(losses) / len(losses) if losses else None, campaign="clustering", step_s=step,
                minutes_left=max(left, 0) * table.minutes_per_run / table.side,
                note=f"{len(done)} of {len(done) + max(left, 0)} runs, {table.minutes_per_run:g} net min each, "
                     f"{table.side} side by side")

"""Where the campaigns stand (`swarmctl campaign status`): for each campaign its number against the paper's
and the work done so far, and what the next job would do with a given wall: the order, the shares and the
step modes that :mod:`swarmctl.campaigns.plan` computes for `swarmctl campaign run` (shown, not computed
again)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from swarmctl.campaigns import plan as campaign
from swarmctl.campaigns.job import PACK_RESERVE, TIMING
from swarmctl.campaigns.runners import read_json


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
    timing_from: str | None  # where the step timings come from (None: no job measured them yet)


TASK_OF = {"clustering": "clustering", "mog": "mog", **{name: "image" for name in campaign.IMAGES}}


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
        ours = p.get("best_log_likelihood", p.get("start_log_likelihood"))
        epochs = sum(s.get("epochs", 0) for s in p.get("sessions", []) if isinstance(s.get("epochs"), int))
        return "test log-likelihood per point", ours, campaign.mog_target(), f"{epochs} epochs in all runs"
    ours = p.get("best_bits_per_dim", p.get("start_bits_per_dim"))
    return ("test bits/dim", ours, campaign.image_target(name),
            f"{p.get('epochs', 0)} epochs, {p.get('net_minutes', 0)} net minutes")


def campaign_status(root: Path = campaign.CAMPAIGNS, wall: float = 540.0, graphs_ok: bool = True) -> Status:
    """Every campaign's standing and its part in a next job of ``wall`` seconds (its GPU tests passing, with
    ``graphs_ok``), planned by the same functions the job uses."""
    order = campaign.plan(root)
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
    return Status(tuple(rows), wall, str(root / TIMING) if timing else None)

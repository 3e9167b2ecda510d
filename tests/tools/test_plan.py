"""Where a job's minutes go (tools/campaigns/plan.py): largest gap to the paper first, shares in
proportion to the gaps, a campaign at the paper stops, Fashion-MNIST waits for MNIST."""

import json

import pytest

from tools.campaigns import plan as campaign
from tools.campaigns import runners


def _write(root, name, **progress):
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "progress.json").write_text(json.dumps({"campaign": name, "sessions": [], **progress}))


def test_before_any_job_the_plan_starts_with_mog_and_ends_with_the_clustering_table(tmp_path):
    """MoG is furthest from the paper; the clustering table, with no finished run, fills what is left."""
    from conftest import fresh_campaigns

    plan = campaign.plan(fresh_campaigns(tmp_path / "campaigns"))
    assert [n for n, _ in plan] == ["mog", "mnist", "clustering"]
    assert {n for n, _ in campaign.plan(campaign.CAMPAIGNS)} <= set(campaign.NAMES)  # the committed ones parse


def test_gaps_order_the_campaigns_and_met_ones_stop(tmp_path):
    runs = {r["name"]: {"model": r["model"], "code": r["code"], "seed": r["seed"], "eval_loss": 0.4}
            for r in campaign.table_runs()}
    _write(tmp_path, "clustering", runs=runs)  # the whole table done: the campaign stops
    _write(tmp_path, "mog", best_log_likelihood=-1.6)  # (1.6 - 1.4986) / 1.4986 = 0.068
    _write(tmp_path, "mnist", best_bits_per_dim=0.89 * 1.5)  # 0.5
    _write(tmp_path, "fashion-mnist")
    plan = campaign.plan(tmp_path)
    assert [n for n, _ in plan] == ["mnist", "mog"]
    assert dict(plan)["mnist"] == pytest.approx(0.5) and dict(plan)["mog"] == pytest.approx(0.1014 / 1.4986)
    assert campaign.share(plan, 0, 3000) == pytest.approx(3000 * 0.5 / (0.5 + 0.1014 / 1.4986))
    assert campaign.share(plan, 1, 120) == pytest.approx(120)  # the last one gets what is left

    _write(tmp_path, "mnist", best_bits_per_dim=0.88)  # MNIST reaches the paper: Fashion-MNIST starts
    assert [n for n, _ in campaign.plan(tmp_path)] == ["fashion-mnist", "mog"]


def test_a_clustering_configuration_without_runs_counts_as_nothing_yet(tmp_path):
    first = campaign.table_runs()[0]
    _write(tmp_path, "clustering", runs={first["name"]: {"model": first["model"], "code": first["code"],
                                                         "seed": 0, "eval_loss": 0.416 * 1.6}})
    assert campaign.gap(tmp_path, "clustering") == pytest.approx(0.6 / 6)  # one configuration measured, 60 % off
    _write(tmp_path, "clustering", runs={})
    assert campaign.gap(tmp_path, "clustering") == pytest.approx(0.01)  # runs left: never nothing


def test_a_share_leaves_the_later_campaigns_their_minimum():
    """MoG comes first but must leave MNIST its two minutes of training; the clustering table, last, runs
    only when a whole group fits and reserves nothing."""
    plan = [("mog", 0.22), ("mnist", 0.21), ("clustering", 0.01)]
    mnist_min = campaign.minimum("mnist")
    assert mnist_min >= campaign.IMAGE_MIN_TRAIN + campaign.IMAGE_RESERVE
    assert campaign.share(plan, 0, 300) == pytest.approx(300 - mnist_min)
    assert campaign.share(plan, 0, 3000) == pytest.approx(3000 * 0.22 / 0.44)  # enough for both: by the gaps
    assert campaign.share(plan, 1, 250) == pytest.approx(250 * 0.21 / 0.22)


def test_mogs_minimum_is_five_epochs_at_the_slowest_eager_step_any_card_measured(monkeypatch):
    """The seconds below which MoG does not start come from the shipped step timings, not one card's constant:
    a card measured slower raises them."""
    from swarmctl.training.modes import parse_timings

    def card(name, eager):
        return {"card": name, "torch": "2", "date": "d", "tasks": {"mog": {"eager": {"step_seconds": eager}}}}

    monkeypatch.setattr(campaign, "step_timings", lambda: parse_timings({"cards": [card("A", 0.01), card("B", 0.03)]}))
    assert campaign.minimum("mog") == pytest.approx(campaign.MOG_RESERVE + campaign.MOG_MIN_EPOCHS * 550 * 0.03)
    assert campaign.minimum("mog", smoke=True) == 30.0


def test_a_campaign_with_too_little_time_runs_nothing_and_leaves_nothing_to_pack(tmp_path):
    """The first job packed an unchanged clustering progress.json for a table it had no time to start."""
    from conftest import fresh_campaigns

    root = fresh_campaigns(tmp_path / "campaigns")
    ctx = runners.Context(root, tmp_path / "work", tmp_path / "out", False, {}, "data", tmp_path / "d.h5",
                           lambda: True, "test", 16 << 20)
    assert runners.run_clustering(ctx, 50, 50) == 0.0
    assert runners.run_mog(ctx, 20, 20, {"mog_ms_per_step": {"eager": 12.4}}) == 0.0
    assert not (tmp_path / "work" / "parts").exists()
